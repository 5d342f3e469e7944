#pragma once
// RecoveryPlan: which sandboxes of a previous deskboxd a new one may take over, and which of the
// jailer's slots are leftovers to destroy (pools of that process, dead sandboxes). The checks
// that need no socket: SandboxManager::Recover then connects to each candidate's QEMU and agent
// and asks QEMU its status (AdoptedState).
//
// Pure bookkeeping: tests/vmhost/recovery_plan_test.cc.
#include <cstdint>
#include <expected>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "vmhost/sandbox_host.h"

namespace deskbox::vmhost {

class RecoveryPlan {
 public:
  // What the jailer lists: slot → the pid of the QEMU alive in it (0: none).
  explicit RecoveryPlan(std::map<uint32_t, int> listed) : listed_(std::move(listed)) {}

  // Why `wanted` cannot be taken over; empty when it may be tried. `slot_free`: the slot is in
  // this process's range and nothing holds it.
  std::string Refusal(const AdoptRequest& wanted, bool slot_free) const;
  // The sandbox in `slot` is taken over: its slot is no leftover, and no other may claim it.
  void Adopted(uint32_t slot) { adopted_.insert(slot); }
  // The jailer's slots that hold no adopted sandbox, in order.
  std::vector<uint32_t> Leftovers() const;

  // The state of a taken-over sandbox from QEMU's query-status: running or paused; any other
  // status (a guest that shut down, an incoming migration never finished) is refused.
  static std::expected<SandboxState, std::string> AdoptedState(const std::string& qemu_status);

 private:
  std::map<uint32_t, int> listed_;
  std::set<uint32_t> adopted_;
};

}  // namespace deskbox::vmhost
