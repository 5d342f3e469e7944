#pragma once
// VmPools: the VMs made ahead of demand and what to make next.
//  - pre-started: QEMU waiting in -incoming defer on a network slot (QMP handshake done);
//  - warm: restored, handed-out and browser-refreshed guests; a create only sets the clock and
//    reseeds the RNG.
// A create takes warm first, then pre-started; with neither it restores cold. The refill loop
// (SandboxManager::RefillLoop) asks Next() what to make, one VM or slot at a time, warm first:
// it is what makes create fast, and a warm VM is made from a pre-started one.
//
// Pure bookkeeping, no I/O: tests/vmhost/vm_pools_test.cc. Threads: the io_context's.
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "vmhost/sandbox_host.h"

namespace deskbox::vmhost {

struct PoolTargets {
  size_t slots = 0;       // network slots ready (netns + tap + nftables)
  size_t prestarted = 0;  // QEMUs waiting for a restore
  size_t warm = 0;        // restored guests waiting for a client
};

enum class RefillStep {
  kNone,       // every pool is at its target, or nothing can be made
  kWarm,       // restore one (from a pre-started VM if there is one)
  kPrestart,   // start one QEMU in a slot
  kSlot,       // make one network slot ready
};

class VmPools {
 public:
  explicit VmPools(PoolTargets targets) : targets_(targets) {}

  // What the refill loop makes next, given the slots ready and free now.
  RefillStep Next(size_t slots_ready, size_t slots_free) const;
  // Every pool at its target.
  bool Full(size_t slots_ready) const;
  // How long the refill loop sleeps when it is not kicked: the back-off after `failures` failed
  // steps in a row (1 s, doubling, at most 30 s), or a minute with nothing to do.
  static std::chrono::milliseconds Pause(int failures);

  // For a client: the oldest warm VM, else the oldest pre-started one; nullopt when both are
  // empty (a cold restore).
  struct Taken {
    std::shared_ptr<Sandbox> vm;
    CreatePath path;
  };
  std::optional<Taken> TakeForClient();
  // The oldest pre-started VM (to warm it), or nullptr.
  std::shared_ptr<Sandbox> TakePrestarted();
  void AddPrestarted(std::shared_ptr<Sandbox> vm) { prestarted_.push_back(std::move(vm)); }
  void AddWarm(std::shared_ptr<Sandbox> vm) { warm_.push_back(std::move(vm)); }
  // Empties both pools: warm first, then pre-started (their slots are to be released).
  std::vector<std::shared_ptr<Sandbox>> TakeAll();

  size_t prestarted() const { return prestarted_.size(); }
  size_t warm() const { return warm_.size(); }

 private:
  PoolTargets targets_;
  std::deque<std::shared_ptr<Sandbox>> prestarted_;
  std::deque<std::shared_ptr<Sandbox>> warm_;
};

}  // namespace deskbox::vmhost
