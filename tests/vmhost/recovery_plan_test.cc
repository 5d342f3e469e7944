// RecoveryPlan: which sandboxes of a previous process are taken over, why the others are not,
// and which of the jailer's slots are left over.
#include "vmhost/recovery_plan.h"

#include <gtest/gtest.h>

namespace deskbox::vmhost {
namespace {

using Listed = std::map<uint32_t, int>;

AdoptRequest Wanted(uint32_t slot, int pid) { return AdoptRequest{.id = "sb-" + std::to_string(slot), .slot = slot, .qemu_pid = pid}; }

TEST(RecoveryPlan, ASandboxWhoseQemuStillRunsInItsSlotIsTakenOver) {
  RecoveryPlan plan(Listed{{3, 4242}});
  EXPECT_EQ(plan.Refusal(Wanted(3, 4242), true), "");
}

TEST(RecoveryPlan, EachReasonToRefuseIsNamed) {
  RecoveryPlan plan(Listed{{3, 4242}, {4, 0}, {5, 5151}});
  EXPECT_EQ(plan.Refusal(Wanted(9, 99), true), "its network slot is gone");
  EXPECT_EQ(plan.Refusal(Wanted(4, 44), true), "its QEMU process is gone");
  // Another process now has the pid, or the QEMU was replaced.
  EXPECT_EQ(plan.Refusal(Wanted(5, 5152), true), "its QEMU process is gone");
  EXPECT_EQ(plan.Refusal(Wanted(3, 4242), false), "slot is out of range or claimed twice");
}

TEST(RecoveryPlan, ASlotIsTakenOverOnce) {
  RecoveryPlan plan(Listed{{3, 4242}});
  ASSERT_EQ(plan.Refusal(Wanted(3, 4242), true), "");
  plan.Adopted(3);
  // Two records naming one slot: the second is refused even where the slot pool was not told.
  EXPECT_EQ(plan.Refusal(Wanted(3, 4242), true), "slot is out of range or claimed twice");
}

TEST(RecoveryPlan, EverySlotNotTakenOverIsALeftover) {
  RecoveryPlan plan(Listed{{1, 0}, {3, 4242}, {5, 5151}, {7, 777}});
  plan.Adopted(3);
  plan.Adopted(7);
  EXPECT_EQ(plan.Leftovers(), (std::vector<uint32_t>{1, 5}));
  RecoveryPlan none(Listed{});
  EXPECT_TRUE(none.Leftovers().empty());
}

TEST(RecoveryPlan, OnlyARunningOrPausedQemuIsTakenOver) {
  EXPECT_EQ(RecoveryPlan::AdoptedState("running"), SandboxState::kRunning);
  EXPECT_EQ(RecoveryPlan::AdoptedState("paused"), SandboxState::kPaused);
  for (std::string status : {"inmigrate", "shutdown", "internal-error", "guest-panicked", ""}) {
    auto s = RecoveryPlan::AdoptedState(status);
    ASSERT_FALSE(s) << status;
    EXPECT_EQ(s.error(), "QEMU reports status '" + status + "'");
  }
}

}  // namespace
}  // namespace deskbox::vmhost
