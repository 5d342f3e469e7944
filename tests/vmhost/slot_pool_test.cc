// SlotPool: where each network slot is (free, ready, taken), and what the jailer is asked.
#include "vmhost/slot_pool.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>
#include <set>
#include <string>
#include <vector>

namespace deskbox::vmhost {
namespace {

namespace asio = boost::asio;

// A jailer that records what it is asked; CreateSlot of a slot in `refuse` is refused, and
// every call fails at the transport when `down`.
class FakeJailer final : public Jailer {
 public:
  std::vector<std::string> calls;
  std::set<uint32_t> refuse;
  bool down = false;            // no jailer: nothing reached one
  bool broken_mid_call = false;  // the jailer ended during the call

  asio::awaitable<std::expected<JailerResult, std::string>> Call(
      jailer::v1::Request request) override {
    if (down) co_return std::unexpected(std::string(kJailerNotRunning) + " (connection refused)");
    if (broken_mid_call) co_return std::unexpected(std::string("jailer closed the connection"));
    JailerResult r;
    r.response.set_ok(true);
    if (request.has_create_slot()) {
      uint32_t slot = request.create_slot().slot();
      calls.push_back("create " + std::to_string(slot));
      if (refuse.count(slot)) {
        r.response.set_ok(false);
        r.response.set_error("nft: no such table");
      }
    } else if (request.has_destroy_slot()) {
      calls.push_back("destroy " + std::to_string(request.destroy_slot().slot()));
    }
    co_return r;
  }
};

class SlotPoolTest : public ::testing::Test {
 protected:
  template <typename T>
  T Run(asio::awaitable<T> a) {
    auto f = asio::co_spawn(io_, std::move(a), asio::use_future);
    io_.restart();
    io_.run();
    return f.get();
  }
  asio::io_context io_;
  FakeJailer jailer_;
  SlotPool pool_{jailer_, 10, 3};  // slots 10, 11, 12
};

TEST_F(SlotPoolTest, TakeMakesAFreeSlotReadyInOrder) {
  auto a = Run(pool_.Take());
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, 10u);
  EXPECT_EQ(*Run(pool_.Take()), 11u);
  EXPECT_EQ(jailer_.calls, (std::vector<std::string>{"create 10", "create 11"}));
  EXPECT_EQ(pool_.free(), 1u);
  EXPECT_FALSE(pool_.IsFree(10));
}

TEST_F(SlotPoolTest, TakeUsesAReadySlotWithoutTheJailer) {
  auto prepared = Run(pool_.Prepare());
  ASSERT_TRUE(prepared);
  EXPECT_EQ(*prepared, std::optional<uint32_t>(10));
  EXPECT_EQ(pool_.ready(), 1u);
  jailer_.calls.clear();
  EXPECT_EQ(*Run(pool_.Take()), 10u);
  EXPECT_TRUE(jailer_.calls.empty());
  EXPECT_EQ(pool_.ready(), 0u);
}

TEST_F(SlotPoolTest, NoFreeSlotIsACapacityErrorAndPrepareDoesNothing) {
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Run(pool_.Take()));
  auto none = Run(pool_.Take());
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, VmError::Code::kCapacity);
  EXPECT_EQ(none.error().message, "all 3 slots are in use");
  auto prepared = Run(pool_.Prepare());
  ASSERT_TRUE(prepared);
  EXPECT_FALSE(*prepared);
}

TEST_F(SlotPoolTest, ARefusedCreateDestroysWhatItLeftAndFreesTheSlot) {
  jailer_.refuse = {10};
  auto a = Run(pool_.Take());
  ASSERT_FALSE(a);
  EXPECT_EQ(a.error().code, VmError::Code::kJailer);
  EXPECT_EQ(a.error().message, "nft: no such table");
  EXPECT_EQ(jailer_.calls, (std::vector<std::string>{"create 10", "destroy 10"}));
  EXPECT_TRUE(pool_.IsFree(10));
  EXPECT_EQ(pool_.free(), 3u);
  // Prepare alike: nothing is left ready.
  EXPECT_FALSE(Run(pool_.Prepare()));
  EXPECT_EQ(pool_.ready(), 0u);
  EXPECT_TRUE(pool_.IsFree(10));
}

TEST_F(SlotPoolTest, ASlotTheJailerCouldNotDestroyIsSetAsideUntilItCan) {
  auto a = Run(pool_.Take());
  ASSERT_TRUE(a);
  jailer_.down = true;
  Run(pool_.Release(*a));
  EXPECT_FALSE(pool_.IsFree(*a)) << "its QEMU may still run: not reused as it is";
  EXPECT_EQ(pool_.set_aside(), 1u);
  EXPECT_EQ(pool_.free(), 2u);
  // Still down: Take tries again and fails at the jailer; the slot it tried to make was never
  // touched, so it is free again.
  EXPECT_FALSE(Run(pool_.Take()));
  EXPECT_EQ(pool_.set_aside(), 1u);
  EXPECT_EQ(pool_.free(), 2u);
  // A jailer that ends during a CreateSlot may leave the slot half made: set aside too.
  jailer_.down = false;
  jailer_.broken_mid_call = true;
  EXPECT_FALSE(Run(pool_.Take()));
  EXPECT_EQ(pool_.set_aside(), 2u);
  // The jailer is back: the next Take destroys both first, then takes the lowest free slot.
  jailer_.broken_mid_call = false;
  jailer_.calls.clear();
  auto b = Run(pool_.Take());
  ASSERT_TRUE(b);
  EXPECT_EQ(jailer_.calls, (std::vector<std::string>{"destroy 10", "destroy 11", "create 10"}));
  EXPECT_EQ(pool_.set_aside(), 0u);
  EXPECT_EQ(*b, *a);
}

TEST_F(SlotPoolTest, ReleaseReadyAlsoDestroysTheSlotsSetAside) {
  auto a = Run(pool_.Take());
  ASSERT_TRUE(a);
  jailer_.down = true;
  Run(pool_.Release(*a));
  jailer_.down = false;
  jailer_.calls.clear();
  Run(pool_.ReleaseReady());
  EXPECT_EQ(jailer_.calls, (std::vector<std::string>{"destroy " + std::to_string(*a)}));
  EXPECT_EQ(pool_.free(), 3u);
}

TEST_F(SlotPoolTest, ClaimTakesOnlyAFreeSlot) {
  EXPECT_TRUE(pool_.Claim(11));
  EXPECT_FALSE(pool_.Claim(11));  // taken already
  EXPECT_FALSE(pool_.Claim(13));  // not ours
  EXPECT_EQ(*Run(pool_.Take()), 10u);
  EXPECT_EQ(*Run(pool_.Take()), 12u);
  EXPECT_TRUE(jailer_.calls.size() == 2 && jailer_.calls[1] == "create 12");
}

TEST_F(SlotPoolTest, ReleaseReadyDestroysEveryReadySlot) {
  ASSERT_TRUE(Run(pool_.Prepare()));
  ASSERT_TRUE(Run(pool_.Prepare()));
  jailer_.calls.clear();
  Run(pool_.ReleaseReady());
  EXPECT_EQ(jailer_.calls, (std::vector<std::string>{"destroy 10", "destroy 11"}));
  EXPECT_EQ(pool_.ready(), 0u);
  EXPECT_EQ(pool_.free(), 3u);
}

}  // namespace
}  // namespace deskbox::vmhost
