#include "api/sandbox_registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <filesystem>

#include "fake_clock.h"
#include "recorder/fake_event_sink.h"

namespace deskbox::api {
namespace {

namespace asio = boost::asio;
using vmhost::SandboxState;

struct Seen {
  std::string id;
  SandboxState from, to;
};

class Recorder final : public SandboxStateListener {
 public:
  void OnSandboxState(const SandboxRecord& r, SandboxState from) override {
    seen.push_back({r.id, from, r.state});
  }
  std::vector<Seen> seen;
};

class SandboxRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("deskbox-registry-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    auto s = Store::Open((dir_ / "db").string());
    ASSERT_TRUE(s) << s.error();
    store_ = std::move(*s);
    registry_ = std::make_unique<SandboxRegistry>(io_.get_executor(), *store_, events_, clock_);
    registry_->Subscribe(&listener_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  SandboxRecord& AddRunning(const std::string& id, uint32_t timeout_s = 60) {
    SandboxRecord r;
    r.id = id;
    r.state = SandboxState::kRunning;
    r.timeout_s = timeout_s;
    r.created_at_ms = clock_.NowMs();
    r.expires_at_ms = clock_.NowMs() + timeout_s * 1000;
    auto added = registry_->Add(std::move(r), {.reason = "api", .detail = "created"});
    EXPECT_TRUE(added) << added.error().message;
    return **added;
  }
  int Status(const std::optional<HttpResponse>& r) { return r ? static_cast<int>(r->status) : 0; }

  std::filesystem::path dir_;
  asio::io_context io_;
  std::unique_ptr<Store> store_;
  recorder::FakeEventSink events_;
  FakeClock clock_;
  Recorder listener_;
  std::unique_ptr<SandboxRegistry> registry_;
};

TEST_F(SandboxRegistryTest, AddAnnouncesTheNewStateOnceOnTheTimelineAndToListeners) {
  AddRunning("sb-a");
  auto events = events_.events();  // a copy: the sink's own list may grow
  ASSERT_EQ(events.size(), 1u);
  const auto& l = events[0].lifecycle();
  EXPECT_EQ(l.from_state(), "");
  EXPECT_EQ(l.to_state(), "running");
  EXPECT_EQ(l.detail(), "created");
  EXPECT_EQ(events[0].actor().kind(), recorder::v1::Actor::SYSTEM);
  ASSERT_EQ(listener_.seen.size(), 1u);
  EXPECT_EQ(listener_.seen[0].to, SandboxState::kRunning);
}

TEST_F(SandboxRegistryTest, TransitionSavesTimesTheCountdownAndTellsListeners) {
  SandboxRecord& r = AddRunning("sb-a", 30);
  clock_.Advance(std::chrono::seconds(10));
  ASSERT_TRUE(registry_->Transition(r, SandboxState::kPaused, {.reason = "api"}));
  EXPECT_EQ(r.expires_at_ms, 0) << "a paused sandbox does not time out";
  clock_.Advance(std::chrono::seconds(5));
  ASSERT_TRUE(registry_->Transition(r, SandboxState::kRunning, {.reason = "api"}));
  EXPECT_EQ(r.expires_at_ms, clock_.NowMs() + 30000) << "the countdown starts again on resume";
  ASSERT_TRUE(registry_->Transition(r, SandboxState::kStopped, {.reason = "api"}));
  EXPECT_EQ(r.stopped_at_ms, clock_.NowMs());
  ASSERT_EQ(listener_.seen.size(), 4u);
  EXPECT_EQ(listener_.seen[3].from, SandboxState::kRunning);
  EXPECT_EQ(listener_.seen[3].to, SandboxState::kStopped);
  // What was saved is what a restart loads.
  auto loaded = store_->LoadSandboxes();
  ASSERT_TRUE(loaded);
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].state, SandboxState::kStopped);
  EXPECT_EQ((*loaded)[0].stopped_at_ms, clock_.NowMs());
  auto events = events_.events();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[3].lifecycle().from_state(), "running");
  EXPECT_EQ(events[3].lifecycle().to_state(), "stopped");
}

TEST_F(SandboxRegistryTest, TransitionsOutsideVmhostsTableAreRefused) {
  SandboxRecord& r = AddRunning("sb-a");
  ASSERT_TRUE(registry_->Transition(r, SandboxState::kStopped, {.reason = "api"}));
  size_t events = events_.size(), seen = listener_.seen.size();
  EXPECT_FALSE(registry_->Transition(r, SandboxState::kRunning, {.reason = "api"}))
      << "stopped is terminal";
  EXPECT_FALSE(registry_->Transition(r, SandboxState::kPaused, {.reason = "api"}));
  EXPECT_EQ(r.state, SandboxState::kStopped);
  EXPECT_EQ(events_.size(), events) << "a refused change writes no event";
  EXPECT_EQ(listener_.seen.size(), seen);
  SandboxRecord& f = AddRunning("sb-b");
  ASSERT_TRUE(registry_->Transition(f, SandboxState::kFailed,
                                    {.reason = "qemu_exit", .detail = "QEMU exited"}));
  EXPECT_EQ(f.failure, "QEMU exited") << "a failure without a reason of its own takes the cause's";
  EXPECT_FALSE(registry_->Transition(f, SandboxState::kRunning, {.reason = "api"}));
}

TEST_F(SandboxRegistryTest, AReadoptedSandboxKeepsItsCountdown) {
  SandboxRecord& r = AddRunning("sb-a", 60);
  int64_t expires = r.expires_at_ms;
  clock_.Advance(std::chrono::seconds(20));
  ASSERT_TRUE(registry_->Transition(r, SandboxState::kRunning, {.reason = "restart_recovery"}));
  EXPECT_EQ(r.expires_at_ms, expires);
  auto events = events_.events();
  EXPECT_EQ(events.back().lifecycle().reason(), "restart_recovery");
}

TEST_F(SandboxRegistryTest, GuestOperationsAreRefusedOrInterruptedByDeleteAndPause) {
  EXPECT_EQ(registry_->BeginGuestOperation("sb-none", "exec").error().status, 404u);
  SandboxRecord& r = AddRunning("sb-a");
  auto op = registry_->BeginGuestOperation("sb-a", "exec");
  ASSERT_TRUE(op);
  EXPECT_FALSE(op->Interrupted());
  registry_->MarkDeleting("sb-a");
  EXPECT_EQ(Status(op->Interrupted()), 410) << "a delete under way ends operations in flight";
  EXPECT_EQ(registry_->BeginGuestOperation("sb-a", "exec").error().status, 410u);
  ASSERT_TRUE(registry_->Transition(r, SandboxState::kStopped, {.reason = "api"}));
  EXPECT_EQ(Status(op->Interrupted()), 410);
  EXPECT_FALSE(registry_->Deleting("sb-a")) << "the mark ends with the sandbox";
  EXPECT_EQ(registry_->BeginGuestOperation("sb-a", "exec").error().status, 409u);

  SandboxRecord& p = AddRunning("sb-b");
  auto op2 = registry_->BeginGuestOperation("sb-b", "file upload");
  ASSERT_TRUE(op2);
  ASSERT_TRUE(registry_->Transition(p, SandboxState::kPaused, {.reason = "api"}));
  auto answer = op2->Interrupted();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 409u);
  EXPECT_NE(answer->body.find("paused during the file upload"), std::string::npos) << answer->body;
}

TEST_F(SandboxRegistryTest, LifecycleTurnsAreTakenInOrderOfArrival) {
  AddRunning("sb-a");
  std::vector<int> order;
  auto first = registry_->TryTurn("sb-a");
  ASSERT_TRUE(first);
  EXPECT_FALSE(registry_->TryTurn("sb-a")) << "held";
  EXPECT_TRUE(registry_->TryTurn("sb-b")) << "turns are per sandbox";
  for (int i = 0; i < 3; ++i) {
    asio::co_spawn(
        io_,
        [&, i]() -> asio::awaitable<void> {
          auto turn = co_await registry_->TakeTurn("sb-a");
          order.push_back(i);
        },
        asio::detached);
  }
  io_.poll();
  EXPECT_TRUE(order.empty()) << "nobody runs while the first turn is held";
  first.reset();
  io_.run();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(registry_->TryTurn("sb-a")) << "free again once every waiter has had its turn";
}

TEST_F(SandboxRegistryTest, AliveCountsCreatingRunningAndPaused) {
  AddRunning("sb-a");
  SandboxRecord& b = AddRunning("sb-b");
  SandboxRecord& c = AddRunning("sb-c");
  ASSERT_TRUE(registry_->Transition(b, SandboxState::kPaused, {.reason = "api"}));
  ASSERT_TRUE(registry_->Transition(c, SandboxState::kFailed, {.reason = "qemu_exit"}));
  EXPECT_EQ(registry_->AliveCount(), 2u);
}

}  // namespace
}  // namespace deskbox::api
