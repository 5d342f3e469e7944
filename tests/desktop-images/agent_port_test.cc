// Port discovery, and the I/O loop end to end over a socketpair standing in for the port.
#include "agent/port.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <thread>

#include "agent_fakes.h"
#include "desktop_images/agent_frame.h"

namespace deskbox::agent {
namespace {

using namespace std::chrono_literals;
namespace di = ::deskbox::desktop_images;

TEST(AgentPort, FindsThePortByName) {
  testing::TempDir sys;
  for (auto [entry, name] : {std::pair{"vport0p1", "org.qemu.guest_agent.0\n"},
                             std::pair{"vport1p1", "org.deskbox.agent\n"},
                             std::pair{"vport1p2", "org.deskbox.agent.other\n"}}) {
    ASSERT_EQ(::mkdir(sys.File(entry).c_str(), 0755), 0);
    testing::WriteFileOrDie(sys.File(std::string(entry) + "/name"), name);
  }
  ASSERT_EQ(::mkdir(sys.File("vport2p1").c_str(), 0755), 0);  // no name file
  EXPECT_EQ(FindAgentPort(sys.path(), "/dev", "org.deskbox.agent"), "/dev/vport1p1");
  EXPECT_FALSE(FindAgentPort(sys.path(), "/dev", "org.nothing"));
  EXPECT_FALSE(FindAgentPort(sys.File("missing"), "/dev", "org.deskbox.agent"));
}

// The host side of a socketpair "port".
class FakeHost {
 public:
  explicit FakeHost(int fd) : fd_(fd) {}
  ~FakeHost() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  void Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      ASSERT_GT(n, 0);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  void SendRequest(const pb::Request& request) { Send(*di::EncodeFrame(request)); }
  // Next response, or nullopt on timeout/EOF.
  std::optional<pb::Response> Receive(std::chrono::milliseconds timeout = 5s) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      if (!queue_.empty()) {
        auto response = di::ParseResponse(queue_.front());
        queue_.pop_front();
        if (!response) return std::nullopt;
        return *response;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left <= 0ms) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char buf[65536];
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(buf), static_cast<size_t>(n));
      while (!bytes.empty()) {
        bytes = bytes.subspan(reader_.Feed(bytes));
        auto next = reader_.Next();
        if (!next) return std::nullopt;
        if (*next) queue_.push_back(std::move(**next));
      }
    }
  }
  // True if the agent closed its end (EOF) within the timeout.
  bool SeesEof(std::chrono::milliseconds timeout = 5s) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char c;
    return ::read(fd_, &c, 1) == 0;
  }

 private:
  int fd_;
  di::FrameReader reader_;
  std::deque<std::string> queue_;
};

struct PortLoopFixture : ::testing::Test {
  testing::FakeClock clock;
  testing::FakeSystemControl system;
  testing::FakeProcessRunner processes;
  testing::FakeDesktopProbe desktop;
  ThreadTaskRunner tasks{8};
  std::unique_ptr<AgentService> service;
  std::unique_ptr<PortLoop> loop;
  std::thread loop_thread;

  std::mutex mu;
  std::vector<int> host_fds;  // host ends handed out by the opener, in order
  std::atomic<int> opens{0};

  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);
    service = std::make_unique<AgentService>(AgentDeps{clock, system, processes, desktop, tasks});
    PortOpener opener = [this]() -> std::expected<UniqueFd, std::string> {
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return std::unexpected("socketpair");
      // A small buffer so big frames exercise partial writes and EAGAIN.
      const int small = 16384;
      ::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
      ::fcntl(sv[0], F_SETFL, O_NONBLOCK);
      std::lock_guard lock(mu);
      host_fds.push_back(sv[1]);
      ++opens;
      return UniqueFd(sv[0]);
    };
    loop = std::make_unique<PortLoop>(*service, opener,
                                      PortLoopOptions{.wakeup = 50ms, .reopen_delay = 100ms});
    loop_thread = std::thread([this] { loop->Run(-1); });
  }
  void TearDown() override {
    loop->Stop();
    loop_thread.join();
    loop.reset();
    service.reset();
  }
  // Waits for the n-th connection (1-based) and returns its host end.
  std::unique_ptr<FakeHost> Host(int n) {
    for (int i = 0; i < 500 && opens.load() < n; ++i) std::this_thread::sleep_for(10ms);
    std::lock_guard lock(mu);
    if (static_cast<int>(host_fds.size()) < n) return nullptr;
    return std::make_unique<FakeHost>(host_fds[n - 1]);
  }
  static pb::Request Ping(uint64_t id) {
    pb::Request r;
    r.set_id(id);
    r.mutable_ping();
    return r;
  }
};

TEST_F(PortLoopFixture, PingPong) {
  auto host = Host(1);
  ASSERT_TRUE(host);
  host->SendRequest(Ping(1));
  host->SendRequest(Ping(2));
  auto one = host->Receive();
  auto two = host->Receive();
  ASSERT_TRUE(one && two);
  EXPECT_EQ(one->id(), 1u);
  EXPECT_TRUE(one->has_pong());
  EXPECT_EQ(two->id(), 2u);
  EXPECT_EQ(loop->frames_received(), 2u);
  EXPECT_TRUE(loop->connected());
}

TEST_F(PortLoopFixture, FrameSplitIntoSingleBytes) {
  auto host = Host(1);
  ASSERT_TRUE(host);
  const std::string frame = *di::EncodeFrame(Ping(9));
  for (char c : frame) {
    host->Send(std::string_view(&c, 1));
    std::this_thread::sleep_for(1ms);
  }
  auto pong = host->Receive();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->id(), 9u);
}

TEST_F(PortLoopFixture, LargeResponseSurvivesPartialWrites) {
  processes.handler = [](const ExecSpec&) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.stdout_data = testing::RandomBytes(5 << 20, 4);
    return o;
  };
  auto host = Host(1);
  ASSERT_TRUE(host);
  pb::Request exec;
  exec.set_id(3);
  exec.mutable_exec()->set_shell("big");
  exec.mutable_exec()->set_cwd("/");
  host->SendRequest(exec);
  host->SendRequest(Ping(4));
  std::map<uint64_t, pb::Response> got;
  for (int i = 0; i < 2; ++i) {
    auto r = host->Receive(10s);
    ASSERT_TRUE(r);
    got[r->id()] = *r;
  }
  EXPECT_EQ(got[3].exec().stdout(), testing::RandomBytes(5 << 20, 4));
  EXPECT_TRUE(got[4].has_pong());
}

TEST_F(PortLoopFixture, ZeroLengthFrameReopensTheChannel) {
  auto host = Host(1);
  ASSERT_TRUE(host);
  host->Send(std::string("\0\0\0\0", 4));
  EXPECT_TRUE(host->SeesEof());
  auto host2 = Host(2);
  ASSERT_TRUE(host2) << "the agent did not reopen its port";
  host2->SendRequest(Ping(5));
  auto pong = host2->Receive();
  ASSERT_TRUE(pong);
  EXPECT_EQ(pong->id(), 5u);
  EXPECT_EQ(loop->reopens(), 1u);
  EXPECT_EQ(opens.load(), 2) << "reopened exactly once";
}

TEST_F(PortLoopFixture, OversizeAndGarbageFramesReopen) {
  auto host = Host(1);
  ASSERT_TRUE(host);
  host->Send(std::string("\x01\x00\x00\x01", 4));  // 16 MiB + 1
  EXPECT_TRUE(host->SeesEof());
  auto host2 = Host(2);
  ASSERT_TRUE(host2);
  host2->Send(std::string("\x00\x00\x00\x02\x0f\x00", 6));  // payload does not parse
  EXPECT_TRUE(host2->SeesEof());
  auto host3 = Host(3);
  ASSERT_TRUE(host3);
  host3->SendRequest(Ping(6));
  ASSERT_TRUE(host3->Receive());
  EXPECT_EQ(loop->reopens(), 2u);
}

TEST_F(PortLoopFixture, RepliesOfAnEarlierConnectionAreDropped) {
  processes.handler = [](const ExecSpec&) -> std::expected<ExecOutcome, AgentError> {
    std::this_thread::sleep_for(300ms);
    ExecOutcome o;
    o.stdout_data = "stale";
    return o;
  };
  auto host = Host(1);
  ASSERT_TRUE(host);
  pb::Request exec;
  exec.set_id(1);
  exec.mutable_exec()->set_shell("slow");
  exec.mutable_exec()->set_cwd("/");
  host->SendRequest(exec);
  std::this_thread::sleep_for(50ms);
  host->Send(std::string("\0\0\0\0", 4));  // reopen while the exec runs
  auto host2 = Host(2);
  ASSERT_TRUE(host2);
  std::this_thread::sleep_for(500ms);  // the exec finishes meanwhile
  host2->SendRequest(Ping(2));
  auto first = host2->Receive();
  ASSERT_TRUE(first);
  EXPECT_EQ(first->id(), 2u) << "a response of the old connection leaked into the new one";
}

TEST_F(PortLoopFixture, HostDisconnectDropsPartialFramesAndWrites) {
  testing::TempDir dir;
  auto host = Host(1);
  ASSERT_TRUE(host);
  pb::Request write;
  write.set_id(1);
  write.mutable_file_write()->set_path(dir.File("f"));
  write.mutable_file_write()->set_data("abc");
  host->SendRequest(write);
  host->Send(std::string("\x00\x00\x01\x00partial", 11));  // a frame cut short
  for (int i = 0; i < 200 && testing::ListDir(dir.path()).empty(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(testing::ListDir(dir.path()).size(), 1u) << "temp file of the write in progress";
  host->Close();  // for a socketpair, EOF: what virtio_console shows when the host goes away
  for (int i = 0; i < 200 && loop->connected(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_FALSE(loop->connected());
  for (int i = 0; i < 200 && !testing::ListDir(dir.path()).empty(); ++i) std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(testing::ListDir(dir.path()).empty()) << "unfinished write not discarded";
  EXPECT_EQ(loop->reopens(), 0u) << "a disconnect is not a protocol error";
}

TEST(AgentPortLoop, RetriesUntilThePortAppears) {
  testing::FakeClock clock;
  testing::FakeSystemControl system;
  testing::FakeProcessRunner processes;
  testing::FakeDesktopProbe desktop;
  InlineTaskRunner tasks;
  AgentService service(AgentDeps{clock, system, processes, desktop, tasks});
  std::atomic<int> attempts{0};
  PortLoop loop(service, [&]() -> std::expected<UniqueFd, std::string> {
    ++attempts;
    return std::unexpected("not yet");
  }, PortLoopOptions{.wakeup = 20ms});
  std::thread t([&] { loop.Run(-1); });
  std::this_thread::sleep_for(300ms);
  loop.Stop();
  t.join();
  EXPECT_GE(attempts.load(), 3);
  EXPECT_LE(attempts.load(), 30) << "retrying without sleeping";
}

}  // namespace
}  // namespace deskbox::agent
