// VmPools: what the refill loop makes next, what a create is given, and the back-off.
#include "vmhost/vm_pools.h"

#include <gtest/gtest.h>

namespace deskbox::vmhost {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<Sandbox> Vm() { return std::make_shared<Sandbox>(); }

TEST(VmPools, RefillsWarmFirstThenPrestartedThenSlots) {
  VmPools pools({.slots = 2, .prestarted = 1, .warm = 1});
  EXPECT_EQ(pools.Next(0, 10), RefillStep::kWarm);
  pools.AddWarm(Vm());
  EXPECT_EQ(pools.Next(0, 10), RefillStep::kPrestart);
  pools.AddPrestarted(Vm());
  EXPECT_EQ(pools.Next(0, 10), RefillStep::kSlot);
  EXPECT_EQ(pools.Next(1, 10), RefillStep::kSlot);
  EXPECT_FALSE(pools.Full(1));
  EXPECT_EQ(pools.Next(2, 10), RefillStep::kNone);
  EXPECT_TRUE(pools.Full(2));
}

TEST(VmPools, NoSlotStepWithoutAFreeSlot) {
  VmPools pools({.slots = 2, .prestarted = 0, .warm = 0});
  EXPECT_EQ(pools.Next(0, 0), RefillStep::kNone);
  EXPECT_EQ(pools.Next(0, 1), RefillStep::kSlot);
  // A VM's own slot comes from SlotPool::Take, which reports running out itself.
  VmPools vms({.slots = 0, .prestarted = 1, .warm = 1});
  EXPECT_EQ(vms.Next(0, 0), RefillStep::kWarm);
}

TEST(VmPools, PoolsOfSizeZeroAreNeverRefilled) {
  VmPools pools({});
  EXPECT_EQ(pools.Next(0, 64), RefillStep::kNone);
  EXPECT_TRUE(pools.Full(0));
  EXPECT_FALSE(pools.TakeForClient());
}

TEST(VmPools, AClientGetsWarmBeforePrestartedOldestFirst) {
  VmPools pools({.slots = 0, .prestarted = 2, .warm = 2});
  auto p1 = Vm(), p2 = Vm(), w1 = Vm(), w2 = Vm();
  pools.AddPrestarted(p1);
  pools.AddPrestarted(p2);
  pools.AddWarm(w1);
  pools.AddWarm(w2);
  std::vector<std::pair<std::shared_ptr<Sandbox>, CreatePath>> got;
  while (auto t = pools.TakeForClient()) got.emplace_back(t->vm, t->path);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], std::make_pair(w1, CreatePath::kWarm));
  EXPECT_EQ(got[1], std::make_pair(w2, CreatePath::kWarm));
  EXPECT_EQ(got[2], std::make_pair(p1, CreatePath::kPrestarted));
  EXPECT_EQ(got[3], std::make_pair(p2, CreatePath::kPrestarted));
  EXPECT_EQ(pools.warm(), 0u);
  EXPECT_EQ(pools.prestarted(), 0u);
  // Emptied, the pools want refilling again, warm first.
  EXPECT_EQ(pools.Next(0, 4), RefillStep::kWarm);
}

TEST(VmPools, AWarmRefillConsumesAPrestartedVm) {
  VmPools pools({.slots = 0, .prestarted = 1, .warm = 1});
  EXPECT_EQ(pools.TakePrestarted(), nullptr);
  auto p = Vm();
  pools.AddPrestarted(p);
  EXPECT_EQ(pools.Next(0, 4), RefillStep::kWarm);
  EXPECT_EQ(pools.TakePrestarted(), p);
  pools.AddWarm(p);
  EXPECT_EQ(pools.Next(0, 4), RefillStep::kPrestart);
}

TEST(VmPools, TakeAllEmptiesBothPoolsWarmFirst) {
  VmPools pools({.slots = 0, .prestarted = 1, .warm = 1});
  auto p = Vm(), w = Vm();
  pools.AddPrestarted(p);
  pools.AddWarm(w);
  auto all = pools.TakeAll();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], w);
  EXPECT_EQ(all[1], p);
  EXPECT_EQ(pools.warm() + pools.prestarted(), 0u);
  EXPECT_TRUE(pools.TakeAll().empty());
}

TEST(VmPools, PauseBacksOffDoublingToThirtySeconds) {
  EXPECT_EQ(VmPools::Pause(0), milliseconds(60000));  // nothing to do: until kicked
  EXPECT_EQ(VmPools::Pause(1), milliseconds(1000));
  EXPECT_EQ(VmPools::Pause(2), milliseconds(2000));
  EXPECT_EQ(VmPools::Pause(5), milliseconds(16000));
  EXPECT_EQ(VmPools::Pause(6), milliseconds(30000));
  EXPECT_EQ(VmPools::Pause(1000), milliseconds(30000));
  EXPECT_EQ(VmPools::Pause(-1), milliseconds(60000));
}

}  // namespace
}  // namespace deskbox::vmhost
