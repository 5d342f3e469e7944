#include "vmhost/vm_pools.h"

#include <algorithm>

namespace deskbox::vmhost {

RefillStep VmPools::Next(size_t slots_ready, size_t slots_free) const {
  if (warm_.size() < targets_.warm) return RefillStep::kWarm;
  if (prestarted_.size() < targets_.prestarted) return RefillStep::kPrestart;
  if (slots_ready < targets_.slots && slots_free > 0) return RefillStep::kSlot;
  return RefillStep::kNone;
}

bool VmPools::Full(size_t slots_ready) const {
  return slots_ready >= targets_.slots && prestarted_.size() >= targets_.prestarted && warm_.size() >= targets_.warm;
}

std::chrono::milliseconds VmPools::Pause(int failures) {
  if (failures <= 0) return std::chrono::milliseconds(60000);
  return std::chrono::milliseconds(std::min(30000, 500 << std::min(failures, 6)));
}

std::optional<VmPools::Taken> VmPools::TakeForClient() {
  if (!warm_.empty()) {
    Taken t{warm_.front(), CreatePath::kWarm};
    warm_.pop_front();
    return t;
  }
  if (auto vm = TakePrestarted()) return Taken{std::move(vm), CreatePath::kPrestarted};
  return std::nullopt;
}

std::shared_ptr<Sandbox> VmPools::TakePrestarted() {
  if (prestarted_.empty()) return nullptr;
  auto vm = prestarted_.front();
  prestarted_.pop_front();
  return vm;
}

std::vector<std::shared_ptr<Sandbox>> VmPools::TakeAll() {
  std::vector<std::shared_ptr<Sandbox>> all(warm_.begin(), warm_.end());
  all.insert(all.end(), prestarted_.begin(), prestarted_.end());
  warm_.clear();
  prestarted_.clear();
  return all;
}

}  // namespace deskbox::vmhost
