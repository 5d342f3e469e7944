#pragma once
// SlotPool: the network slots of one deskboxd. A slot is free, ready (its netns, tap and
// nftables made by the jailer's CreateSlot, waiting for a QEMU) or taken, from Take or Claim
// until Release; never two of these at once.
//
// Threads: the io_context's.
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <deque>
#include <expected>
#include <optional>
#include <set>

#include "vmhost/jailer_client.h"
#include "vmhost/sandbox_host.h"

namespace deskbox::vmhost {

// A jailer call whose refusal (ok false) is an error too: VmError kJailer either way.
boost::asio::awaitable<std::expected<JailerResult, VmError>> CallJailer(Jailer& jailer,
                                                                        jailer::v1::Request request);

class SlotPool {
 public:
  // Slots first_slot .. first_slot + count - 1, all free.
  SlotPool(Jailer& jailer, uint32_t first_slot, uint32_t count);

  // A ready slot, else a free one made ready now. kCapacity when none is free; a jailer failure
  // releases the slot again (Release: set aside if the jailer cannot destroy it).
  boost::asio::awaitable<std::expected<uint32_t, VmError>> Take();
  // Makes one free slot ready, for Take to find: the slot made ready, nullopt when none is free.
  // A jailer failure releases the slot again.
  boost::asio::awaitable<std::expected<std::optional<uint32_t>, VmError>> Prepare();
  // Takes `slot` as it is (a sandbox a previous process left running in it): false when it is
  // not free.
  bool Claim(uint32_t slot);
  // Destroys the slot (QEMU, network, directory) and frees it. When the jailer cannot (it is
  // not running), the slot is set aside, never reused as it is: Take, Prepare and ReleaseReady
  // first destroy the slots set aside, for a jailer started again.
  boost::asio::awaitable<void> Release(uint32_t slot);
  // Releases every ready slot, and those set aside.
  boost::asio::awaitable<void> ReleaseReady();

  bool IsFree(uint32_t slot) const { return free_.count(slot) > 0; }
  size_t free() const { return free_.size(); }
  size_t ready() const { return ready_.size(); }
  size_t set_aside() const { return set_aside_.size(); }

 private:
  boost::asio::awaitable<std::expected<void, VmError>> CreateSlot(uint32_t slot);
  boost::asio::awaitable<void> ReleaseSetAside();

  Jailer& jailer_;
  uint32_t count_;
  std::set<uint32_t> free_;
  std::deque<uint32_t> ready_;
  std::set<uint32_t> set_aside_;  // released while the jailer could not destroy them
};

}  // namespace deskbox::vmhost
