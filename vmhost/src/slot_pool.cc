#include "vmhost/slot_pool.h"

#include <fmt/format.h>

#include <vector>

#include "common/log.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;

namespace {
constexpr char kSlotLog[] = "vmhost";
}  // namespace

asio::awaitable<std::expected<JailerResult, VmError>> CallJailer(Jailer& jailer,
                                                                 jailer::v1::Request request) {
  auto r = co_await jailer.Call(std::move(request));
  if (!r) co_return std::unexpected(VmError{VmError::Code::kJailer, std::move(r.error())});
  if (!r->response.ok())
    co_return std::unexpected(VmError{VmError::Code::kJailer, r->response.error()});
  co_return std::move(*r);
}

SlotPool::SlotPool(Jailer& jailer, uint32_t first_slot, uint32_t count)
    : jailer_(jailer), count_(count) {
  for (uint32_t s = 0; s < count; ++s) free_.insert(first_slot + s);
}

asio::awaitable<std::expected<void, VmError>> SlotPool::CreateSlot(uint32_t slot) {
  jailer::v1::Request req;
  req.mutable_create_slot()->set_slot(slot);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) {
    // Whatever CreateSlot left half made goes with DestroySlot; a call that reached no jailer
    // made nothing.
    if (r.error().message.starts_with(kJailerNotRunning)) free_.insert(slot);
    else co_await Release(slot);
    co_return std::unexpected(r.error());
  }
  co_return std::expected<void, VmError>{};
}

asio::awaitable<std::expected<uint32_t, VmError>> SlotPool::Take() {
  co_await ReleaseSetAside();
  if (!ready_.empty()) {
    uint32_t slot = ready_.front();
    ready_.pop_front();
    co_return slot;
  }
  if (free_.empty())
    co_return std::unexpected(
        VmError{VmError::Code::kCapacity, fmt::format("all {} slots are in use", count_)});
  uint32_t slot = *free_.begin();
  free_.erase(free_.begin());
  if (auto made = co_await CreateSlot(slot); !made) co_return std::unexpected(made.error());
  co_return slot;
}

asio::awaitable<std::expected<std::optional<uint32_t>, VmError>> SlotPool::Prepare() {
  co_await ReleaseSetAside();
  if (free_.empty()) co_return std::optional<uint32_t>{};
  uint32_t slot = *free_.begin();
  free_.erase(free_.begin());
  if (auto made = co_await CreateSlot(slot); !made) co_return std::unexpected(made.error());
  ready_.push_back(slot);
  co_return std::optional<uint32_t>{slot};
}

bool SlotPool::Claim(uint32_t slot) { return free_.erase(slot) > 0; }

asio::awaitable<void> SlotPool::Release(uint32_t slot) {
  jailer::v1::Request req;
  req.mutable_destroy_slot()->set_slot(slot);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) {
    // Its QEMU may still run: reusing the slot now would put a second VM beside it.
    if (set_aside_.insert(slot).second)
      log::Warn(kSlotLog, "releasing slot {}: {}; set aside until the jailer destroys it", slot,
                r.error().message);
    co_return;
  }
  if (set_aside_.erase(slot)) log::Info(kSlotLog, "slot {}: destroyed after all", slot);
  free_.insert(slot);
}

asio::awaitable<void> SlotPool::ReleaseSetAside() {
  std::vector<uint32_t> slots(set_aside_.begin(), set_aside_.end());
  for (uint32_t slot : slots) co_await Release(slot);
}

asio::awaitable<void> SlotPool::ReleaseReady() {
  co_await ReleaseSetAside();
  while (!ready_.empty()) {
    uint32_t slot = ready_.front();
    ready_.pop_front();
    co_await Release(slot);
  }
}

}  // namespace deskbox::vmhost
