#include "recorder/log_event_sink.h"

#include <gtest/gtest.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "recorder/fake_event_sink.h"
#include "recorder_test_util.h"

namespace deskbox::recorder {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using testing::AllKinds;
using testing::TempDir;

std::vector<Event> ReadLog(const std::string& path) {
  std::vector<Event> out;
  auto r = EventLogReader::Open(path, {});
  EXPECT_TRUE(r) << r.error().message;
  if (!r) return out;
  for (;;) {
    auto e = (*r)->Next();
    EXPECT_TRUE(e) << e.error().message;
    if (!e || !*e) break;
    out.push_back(**e);
  }
  return out;
}

Event Cdp(const std::string& sandbox, const std::string& method) {
  Event e;
  e.set_sandbox_id(sandbox);
  e.mutable_cdp()->set_method(method);
  return e;
}

// A gate the writer thread can be held at.
class Gate {
 public:
  void Enter() {
    std::unique_lock lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  bool WaitEntered(int n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return entered_ >= n; });
  }
  void Open() {
    std::lock_guard lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool open_ = false;
};

TEST(LogEventSink, AssignsSeqPerSandboxAndTimeWhenUnset) {
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path(), .now_unix_ns = [] { return int64_t{777}; }});
  ASSERT_TRUE(sink) << sink.error().message;
  for (int i = 0; i < 5; ++i) {
    Event a = Cdp("sb-a", "A" + std::to_string(i));
    a.set_seq(1000 + i);  // ignored: the log assigns seq
    (*sink)->Emit(std::move(a));
    Event b = Cdp("sb-b", "B" + std::to_string(i));
    b.set_time_unix_ns(5'000 + i);
    (*sink)->Emit(std::move(b));
  }
  (*sink)->Flush();
  auto a = ReadLog((*sink)->LogPath("sb-a"));
  auto b = ReadLog((*sink)->LogPath("sb-b"));
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i].seq(), i + 1u);
    EXPECT_EQ(a[i].time_unix_ns(), 777);
    EXPECT_EQ(a[i].cdp().method(), "A" + std::to_string(i));
    EXPECT_EQ(b[i].seq(), i + 1u);
    EXPECT_EQ(b[i].time_unix_ns(), 5'000 + i);
  }
  EXPECT_EQ((*sink)->LogPath("sb-a"), dir.path() + "/sb-a.events");
  auto s = (*sink)->stats();
  EXPECT_EQ(s.accepted, 10u);
  EXPECT_EQ(s.written, 10u);
  EXPECT_EQ(s.dropped_queue_full, 0u);
}

TEST(LogEventSink, FullQueueDropsAndCountsWithoutBlocking) {
  TempDir dir;
  Gate gate;
  auto sink = LogEventSink::Create({.dir = dir.path(),
                                    .queue_capacity = 4,
                                    .before_append = [&](const Event&) { gate.Enter(); }});
  ASSERT_TRUE(sink);
  (*sink)->Emit(Cdp("sb-a", "first"));
  ASSERT_TRUE(gate.WaitEntered(1, 5s)) << "the writer never took the first event";
  // The writer is stuck on the first event. 100 more: 4 fit in the queue, 96 are dropped, and
  // Emit must return every time (run elsewhere so a blocking Emit fails instead of hanging).
  auto emitter = std::async(std::launch::async, [&] {
    for (int i = 0; i < 100; ++i) (*sink)->Emit(Cdp("sb-a", "more"));
  });
  bool returned = emitter.wait_for(10s) == std::future_status::ready;
  gate.Open();
  ASSERT_TRUE(returned) << "Emit blocked on a full queue";
  auto s = (*sink)->stats();
  EXPECT_EQ((*sink)->dropped(), 96u);
  EXPECT_EQ(s.dropped_queue_full, 96u);
  EXPECT_EQ(s.accepted, 5u);
  (*sink)->Flush();
  auto events = ReadLog((*sink)->LogPath("sb-a"));
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].cdp().method(), "first");
  EXPECT_EQ(events[4].seq(), 5u);
  EXPECT_EQ((*sink)->stats().queue_depth, 0u);
}

TEST(LogEventSink, QueueIsBoundedInBytesToo) {
  TempDir dir;
  Gate gate;
  auto sink = LogEventSink::Create({.dir = dir.path(),
                                    .queue_max_bytes = 10'000,
                                    .before_append = [&](const Event&) { gate.Enter(); }});
  ASSERT_TRUE(sink);
  (*sink)->Emit(Cdp("sb-a", "first"));
  ASSERT_TRUE(gate.WaitEntered(1, 5s));
  for (int i = 0; i < 10; ++i) (*sink)->Emit(Cdp("sb-a", std::string(3000, 'm')));
  gate.Open();
  EXPECT_EQ((*sink)->dropped(), 7u);  // 3 of 3000+ bytes fit in 10000
  (*sink)->Flush();
  EXPECT_EQ(ReadLog((*sink)->LogPath("sb-a")).size(), 4u);
}

TEST(LogEventSink, ConcurrentEmitKeepsSeqStrictlyIncreasingAndGapFree) {
  TempDir dir;
  auto sink =
      LogEventSink::Create({.dir = dir.path(), .queue_capacity = 100'000, .sync_interval = 5ms});
  ASSERT_TRUE(sink);
  constexpr int kThreads = 4, kPerThread = 600;
  const std::vector<std::string> sandboxes = {"sb-a", "sb-b", "sb-c"};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Event e = Cdp(sandboxes[i % sandboxes.size()], "m");
        e.set_request_id(std::to_string(t) + ":" + std::to_string(i));
        (*sink)->Emit(std::move(e));
      }
    });
  }
  for (auto& th : threads) th.join();
  (*sink)->Flush();
  EXPECT_EQ((*sink)->stats().dropped_queue_full, 0u);
  size_t total = 0;
  for (const auto& sb : sandboxes) {
    auto events = ReadLog((*sink)->LogPath(sb));
    total += events.size();
    EXPECT_EQ(events.size(), kThreads * kPerThread / sandboxes.size()) << sb;
    std::map<int, int> last_i;  // per emitting thread: order preserved
    for (size_t k = 0; k < events.size(); ++k) {
      EXPECT_EQ(events[k].seq(), k + 1) << sb;
      const auto& rid = events[k].request_id();
      int t = std::stoi(rid.substr(0, rid.find(':')));
      int i = std::stoi(rid.substr(rid.find(':') + 1));
      if (last_i.contains(t)) {
        EXPECT_GT(i, last_i[t]);
      }
      last_i[t] = i;
    }
    EXPECT_TRUE(VerifyLog((*sink)->LogPath(sb)));
  }
  EXPECT_EQ(total, size_t{kThreads * kPerThread});
}

TEST(LogEventSink, SubscribersGetWrittenEventsOnTheirExecutor) {
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path()});
  ASSERT_TRUE(sink);
  asio::io_context io;
  std::mutex mu;
  std::vector<Event> got_a, got_all;
  std::set<std::thread::id> callback_threads;
  auto id_a = (*sink)->Subscribe("sb-a", io.get_executor(), [&](const Event& e) {
    (void)(*sink)->stats();  // the sink's locks are not held while a callback runs
    std::lock_guard lock(mu);
    got_a.push_back(e);
    callback_threads.insert(std::this_thread::get_id());
  });
  (*sink)->Subscribe("", io.get_executor(), [&](const Event& e) {
    std::lock_guard lock(mu);
    got_all.push_back(e);
  });
  for (int i = 0; i < 3; ++i) {
    (*sink)->Emit(Cdp("sb-a", "a"));
    (*sink)->Emit(Cdp("sb-b", "b"));
  }
  // Nothing runs the io_context yet: the writer must not wait for subscribers.
  (*sink)->Flush();
  EXPECT_EQ((*sink)->stats().written, 6u);
  EXPECT_TRUE(got_a.empty());
  io.run();
  io.restart();
  ASSERT_EQ(got_a.size(), 3u);
  ASSERT_EQ(got_all.size(), 6u);
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(got_a[k].sandbox_id(), "sb-a");
    EXPECT_EQ(got_a[k].seq(), k + 1) << "delivered as written, with its seq";
  }
  EXPECT_EQ(callback_threads, std::set<std::thread::id>{std::this_thread::get_id()});

  (*sink)->Unsubscribe(id_a);
  (*sink)->Emit(Cdp("sb-a", "after"));
  (*sink)->Flush();
  io.run();
  EXPECT_EQ(got_a.size(), 3u);
  EXPECT_EQ(got_all.size(), 7u);
}

TEST(LogEventSink, UnsubscribeStopsCallbacksAlreadyPosted) {
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path()});
  ASSERT_TRUE(sink);
  asio::io_context io;
  int calls = 0;
  auto id = (*sink)->Subscribe("sb-a", io.get_executor(), [&](const Event&) { ++calls; });
  (*sink)->Emit(Cdp("sb-a", "a"));
  (*sink)->Flush();
  (*sink)->Unsubscribe(id);  // the callback is posted but has not run
  io.run();
  EXPECT_EQ(calls, 0);
}

TEST(LogEventSink, SlowSubscriberSkipsInsteadOfGrowing) {
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path(), .subscriber_max_pending = 3});
  ASSERT_TRUE(sink);
  asio::io_context io;
  std::vector<uint64_t> seqs;
  (*sink)->Subscribe("sb-a", io.get_executor(), [&](const Event& e) { seqs.push_back(e.seq()); });
  for (int i = 0; i < 10; ++i) (*sink)->Emit(Cdp("sb-a", "a"));
  (*sink)->Flush();
  EXPECT_EQ((*sink)->stats().subscriber_drops, 7u);
  io.run();
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(ReadLog((*sink)->LogPath("sb-a")).size(), 10u) << "the log has everything";
}

TEST(LogEventSink, FollowsALiveLogWithSubscribeThenRead) {
  // The pattern a `follow` stream uses: subscribe, read the file, skip seqs already seen.
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path()});
  ASSERT_TRUE(sink);
  for (int i = 0; i < 4; ++i) (*sink)->Emit(Cdp("sb-a", "before"));
  (*sink)->Flush();
  asio::io_context io;
  std::vector<uint64_t> seen;
  (*sink)->Subscribe("sb-a", io.get_executor(), [&](const Event& e) {
    if (seen.empty() || e.seq() > seen.back()) seen.push_back(e.seq());
  });
  auto reader = EventLogReader::Open((*sink)->LogPath("sb-a"), {.since_seq = 1, .live = true});
  ASSERT_TRUE(reader);
  while (auto e = (*reader)->Next().value()) seen.push_back(e->seq());
  for (int i = 0; i < 3; ++i) (*sink)->Emit(Cdp("sb-a", "after"));
  (*sink)->Flush();
  io.run();
  EXPECT_EQ(seen, (std::vector<uint64_t>{2, 3, 4, 5, 6, 7}));
}

TEST(LogEventSink, InvalidAndOversizedEventsAreDroppedAndCounted) {
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path()});
  ASSERT_TRUE(sink);
  (*sink)->Emit(Cdp("", "no sandbox"));
  (*sink)->Emit(Cdp("../escape", "path"));
  (*sink)->Emit(Cdp("sb-a", std::string(kMaxRecordPayload, 'x')));
  (*sink)->Emit(Cdp("sb-a", "fine"));
  (*sink)->Flush();
  auto s = (*sink)->stats();
  EXPECT_EQ(s.dropped_invalid, 2u);
  EXPECT_EQ(s.dropped_too_large, 1u);
  EXPECT_EQ(s.written, 1u);
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/../escape.events"));
  size_t files = 0;
  for ([[maybe_unused]] auto& f : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);
}

TEST(LogEventSink, LogsSurviveRestartsAndDestroyClosesThem) {
  TempDir dir;
  {
    auto sink = LogEventSink::Create({.dir = dir.path(), .sync = SyncPolicy::kEveryRecord});
    ASSERT_TRUE(sink);
    for (auto e : AllKinds("sb-a")) (*sink)->Emit(std::move(e));
    Event destroyed;
    destroyed.set_sandbox_id("sb-a");
    destroyed.mutable_lifecycle()->set_from_state("running");
    destroyed.mutable_lifecycle()->set_to_state("destroyed");
    (*sink)->Emit(destroyed);
    (*sink)->Emit(Cdp("sb-a", "late"));  // reopens the closed log and continues
  }                                      // destructor writes what is queued
  auto sink = LogEventSink::Create({.dir = dir.path()});
  ASSERT_TRUE(sink);
  (*sink)->Emit(Cdp("sb-a", "after restart"));
  (*sink)->Flush();
  auto events = ReadLog((*sink)->LogPath("sb-a"));
  ASSERT_EQ(events.size(), 10u);
  EXPECT_EQ(events[7].lifecycle().to_state(), "destroyed");
  EXPECT_EQ(events[9].cdp().method(), "after restart");
  EXPECT_EQ(events[9].seq(), 10u);
}

// Descriptors of this process open on `path`.
int OpenDescriptors(const std::string& path) {
  int n = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (std::filesystem::read_symlink(fd.path(), ec) == path) ++n;
  }
  return n;
}

TEST(LogEventSink, EndedSandboxesDoNotKeepTheirLogOpen) {
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path()});
  ASSERT_TRUE(sink);
  for (const char* end : {"stopped", "failed"}) {
    std::string id = std::string("sb-") + end;
    (*sink)->Emit(Cdp(id, "m"));
    (*sink)->Flush();
    const std::string path = (*sink)->LogPath(id);
    EXPECT_EQ(OpenDescriptors(path), 1) << "a live sandbox's log stays open";
    Event last;
    last.set_sandbox_id(id);
    last.mutable_lifecycle()->set_from_state("running");
    last.mutable_lifecycle()->set_to_state(end);
    (*sink)->Emit(last);
    (*sink)->Flush();
    EXPECT_EQ(OpenDescriptors(path), 0) << end;
    // A late event (a connection that ended after the sandbox) is written and closed again.
    (*sink)->Emit(Cdp(id, "late"));
    (*sink)->Flush();
    EXPECT_EQ(OpenDescriptors(path), 0) << end;
    auto events = ReadLog(path);
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[2].cdp().method(), "late");
  }
}

TEST(LogEventSink, ManySandboxesStayUnderTheOpenLogLimit) {
  TempDir dir;
  auto sink = LogEventSink::Create({.dir = dir.path(), .max_open_logs = 2});
  ASSERT_TRUE(sink);
  for (int round = 0; round < 3; ++round)
    for (int s = 0; s < 5; ++s) (*sink)->Emit(Cdp("sb-" + std::to_string(s), "m"));
  (*sink)->Flush();
  for (int s = 0; s < 5; ++s) {
    auto events = ReadLog((*sink)->LogPath("sb-" + std::to_string(s)));
    ASSERT_EQ(events.size(), 3u);
    EXPECT_EQ(events[2].seq(), 3u);
  }
}

TEST(LogEventSink, ACorruptLogIsLeftAloneAndCountedAsWriteErrors) {
  TempDir dir;
  std::string path = dir.File("sb-a.events");
  {
    auto w = EventLogWriter::Open(path, "sb-a", {});
    ASSERT_TRUE(w);
    for (auto e : AllKinds("sb-a")) ASSERT_TRUE((*w)->Append(e));
  }
  auto bytes = ReadFile(path, 1 << 20).value();
  bytes[100] ^= 1;  // inside the first record, with records after it
  ASSERT_TRUE(WriteFileAtomic(path, bytes, 0640));
  auto sink = LogEventSink::Create({.dir = dir.path()});
  ASSERT_TRUE(sink);
  (*sink)->Emit(Cdp("sb-a", "x"));
  (*sink)->Emit(Cdp("sb-b", "y"));
  (*sink)->Flush();
  auto s = (*sink)->stats();
  EXPECT_EQ(s.write_errors, 1u);
  EXPECT_EQ(s.written, 1u);
  EXPECT_EQ(ReadFile(path, 1 << 20).value(), bytes);
}

TEST(FakeEventSink, CollectsEvents) {
  FakeEventSink fake;
  EventSink& sink = fake;
  sink.Emit(Cdp("sb-a", "Page.navigate"));
  sink.Flush();
  ASSERT_EQ(fake.size(), 1u);
  EXPECT_EQ(fake.events()[0].cdp().method(), "Page.navigate");
  fake.Clear();
  EXPECT_EQ(fake.size(), 0u);
}

}  // namespace
}  // namespace deskbox::recorder
