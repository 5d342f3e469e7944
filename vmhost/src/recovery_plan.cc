#include "vmhost/recovery_plan.h"

namespace deskbox::vmhost {

std::string RecoveryPlan::Refusal(const AdoptRequest& wanted, bool slot_free) const {
  if (!slot_free || adopted_.count(wanted.slot)) return "slot is out of range or claimed twice";
  auto it = listed_.find(wanted.slot);
  if (it == listed_.end()) return "its network slot is gone";
  if (it->second == 0 || it->second != wanted.qemu_pid) return "its QEMU process is gone";
  return {};
}

std::vector<uint32_t> RecoveryPlan::Leftovers() const {
  std::vector<uint32_t> out;
  for (const auto& [slot, pid] : listed_)
    if (!adopted_.count(slot)) out.push_back(slot);
  return out;
}

std::expected<SandboxState, std::string> RecoveryPlan::AdoptedState(const std::string& qemu_status) {
  if (qemu_status == "running") return SandboxState::kRunning;
  if (qemu_status == "paused") return SandboxState::kPaused;
  return std::unexpected("QEMU reports status '" + qemu_status + "'");
}

}  // namespace deskbox::vmhost
