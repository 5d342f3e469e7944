// TcpRelay on loopback: bytes both ways, half-close, backpressure, limits, upstream failures.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "forward/tcp_relay.h"

namespace deskbox::forward {
namespace {

using namespace std::chrono_literals;

SocketAddress Loopback(uint16_t port) {
  auto a = SocketAddress::Parse("127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(a.has_value());
  return *a;
}

// A listening socket on 127.0.0.1, port chosen by the kernel.
struct Listener {
  UniqueFd fd;
  uint16_t port = 0;
  Listener() {
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd.get(), 64), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  // Waits up to `timeout` for a connection.
  UniqueFd Accept(std::chrono::milliseconds timeout = 5s) {
    pollfd p{fd.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) != 1) return {};
    return UniqueFd(::accept4(fd.get(), nullptr, nullptr, SOCK_CLOEXEC));
  }
};

UniqueFd Connect(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return {};
  timeval tv{10, 0};  // no test may hang on a read
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  return fd;
}

bool WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// Reads until end of stream (or error/timeout); `eof` says whether it ended cleanly.
std::string ReadToEnd(int fd, bool* eof = nullptr) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (eof) *eof = n == 0;
    return out;
  }
}

std::string ReadExactly(int fd, size_t size) {
  std::string out;
  char buf[65536];
  while (out.size() < size) {
    const ssize_t n = ::read(fd, buf, std::min(sizeof buf, size - out.size()));
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::string RandomBytes(size_t size, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s(size, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// Runs a relay to `upstream_port` on its own thread until the fixture ends.
class RelayTest : public ::testing::Test {
 protected:
  void Start(uint16_t upstream_port, RelayLimits limits = {}) {
    auto relay = TcpRelay::Listen(Loopback(0), Loopback(upstream_port), limits);
    ASSERT_TRUE(relay.has_value()) << relay.error();
    relay_ = std::move(*relay);
    port_ = relay_->listen_address().port();
    ASSERT_NE(port_, 0);
    stop_.reset(::eventfd(0, EFD_CLOEXEC));
    thread_ = std::thread([this] { run_ok_ = relay_->Run(stop_.get()).has_value(); });
  }
  void Stop() {
    if (!thread_.joinable()) return;
    const uint64_t one = 1;
    ASSERT_EQ(::write(stop_.get(), &one, sizeof one), 8);
    thread_.join();
    EXPECT_TRUE(run_ok_);
  }
  void TearDown() override { Stop(); }

  // A client connection through the relay and the upstream's end of it.
  struct Pair {
    UniqueFd client, server;
  };
  Pair ConnectThrough(Listener& upstream) {
    Pair p;
    p.client = Connect(port_);
    EXPECT_TRUE(p.client);
    if (p.client) p.server = upstream.Accept();
    EXPECT_TRUE(p.server);
    return p;
  }

  std::unique_ptr<TcpRelay> relay_;
  uint16_t port_ = 0;
  UniqueFd stop_;
  std::thread thread_;
  std::atomic<bool> run_ok_{false};
};

TEST(SocketAddressTest, ParsesNumericAddressesAndRejectsTheRest) {
  auto v4 = SocketAddress::Parse("10.88.0.2:9222");
  ASSERT_TRUE(v4.has_value());
  EXPECT_EQ(v4->ToString(), "10.88.0.2:9222");
  EXPECT_EQ(v4->port(), 9222);
  auto v6 = SocketAddress::Parse("[fd00:88::2]:9222");
  ASSERT_TRUE(v6.has_value());
  EXPECT_EQ(v6->ToString(), "[fd00:88::2]:9222");
  for (const char* bad : {"localhost:80", "1.2.3.4", "1.2.3.4:", "1.2.3.4:65536", "1.2.3.4:8x",
                          "[::1]80", "[::1", "::1:80", ""}) {
    EXPECT_FALSE(SocketAddress::Parse(bad).has_value()) << bad;
  }
}

TEST_F(RelayTest, CarriesMegabytesBothWaysUnchanged) {
  Listener upstream;
  Start(upstream.port);
  const std::string request = RandomBytes(3 << 20, 1);
  auto [client, server] = ConnectThrough(upstream);
  ASSERT_TRUE(client && server);
  // the server echoes what it gets; the client writes and reads at once (3 MiB is far more than
  // the relay buffers, so this only finishes if both directions keep moving)
  std::thread echo([&] {
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(server.get(), buf, sizeof buf);
      if (n <= 0) break;
      if (!WriteAll(server.get(), buf, static_cast<size_t>(n))) break;
    }
    ::shutdown(server.get(), SHUT_WR);
  });
  std::thread writer([&] {
    EXPECT_TRUE(WriteAll(client.get(), request.data(), request.size()));
    ::shutdown(client.get(), SHUT_WR);
  });
  bool eof = false;
  const std::string echoed = ReadToEnd(client.get(), &eof);
  writer.join();
  echo.join();
  EXPECT_TRUE(eof);
  ASSERT_EQ(echoed.size(), request.size());
  EXPECT_TRUE(echoed == request);
}

TEST_F(RelayTest, AnEndOfStreamIsPassedOnAndTheOtherDirectionGoesOn) {
  Listener upstream;
  Start(upstream.port);
  auto [client, server] = ConnectThrough(upstream);
  ASSERT_TRUE(client && server);
  ASSERT_TRUE(WriteAll(client.get(), "GET / HTTP/1.1\r\n\r\n", 18));
  ::shutdown(client.get(), SHUT_WR);
  bool server_eof = false;
  EXPECT_EQ(ReadToEnd(server.get(), &server_eof), "GET / HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(server_eof) << "the client's FIN reaches the upstream";
  // the upstream answers after the client's half-close; the answer still arrives
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(WriteAll(server.get(), "answer", 6));
  server.reset();
  bool client_eof = false;
  EXPECT_EQ(ReadToEnd(client.get(), &client_eof), "answer");
  EXPECT_TRUE(client_eof);
  for (int i = 0; i < 100 && relay_->open_connections() != 0; ++i)
    std::this_thread::sleep_for(10ms);
  Stop();
  EXPECT_EQ(relay_->open_connections(), 0u);
  EXPECT_EQ(relay_->counters().accepted, 1u);
  EXPECT_EQ(relay_->counters().closed, 1u);
}

TEST_F(RelayTest, AClientThatDoesNotReadHoldsTheUpstreamBack) {
  Listener upstream;
  RelayLimits limits;
  limits.buffer_bytes = 16 * 1024;
  Start(upstream.port, limits);
  auto [client, server] = ConnectThrough(upstream);
  ASSERT_TRUE(client && server);
  const size_t total = 64u << 20;
  const std::string chunk = RandomBytes(1 << 20, 2);
  std::atomic<size_t> sent{0};
  std::thread producer([&] {
    for (size_t i = 0; i < total / chunk.size(); ++i) {
      if (!WriteAll(server.get(), chunk.data(), chunk.size())) return;
      sent += chunk.size();
    }
    ::shutdown(server.get(), SHUT_WR);
  });
  // nothing is read for a while: what the upstream got rid of is bounded by the socket buffers
  // on the way plus the relay's 16 KiB, far less than what it wants to send
  std::this_thread::sleep_for(700ms);
  const size_t sent_while_stalled = sent.load();
  EXPECT_LT(sent_while_stalled, total / 2);
  bool eof = false;
  const std::string got = ReadToEnd(client.get(), &eof);
  producer.join();
  EXPECT_TRUE(eof);
  ASSERT_EQ(got.size(), total);
  for (size_t i = 0; i < total; i += chunk.size()) {
    ASSERT_EQ(std::memcmp(got.data() + i, chunk.data(), chunk.size()), 0) << "at byte " << i;
  }
}

TEST_F(RelayTest, NothingListeningUpstreamClosesTheClient) {
  uint16_t dead_port;
  {
    Listener gone;
    dead_port = gone.port;
  }
  Start(dead_port);
  UniqueFd client = Connect(port_);
  ASSERT_TRUE(client);
  bool eof = false;
  const std::string got = ReadToEnd(client.get(), &eof);
  EXPECT_TRUE(got.empty());
  for (int i = 0; i < 100 && relay_->open_connections() != 0; ++i)
    std::this_thread::sleep_for(10ms);
  Stop();
  EXPECT_EQ(relay_->counters().upstream_failed, 1u);
  EXPECT_EQ(relay_->open_connections(), 0u);
}

TEST_F(RelayTest, ConnectionsBeyondTheLimitAreClosedAndRoomComesBack) {
  Listener upstream;
  RelayLimits limits;
  limits.max_connections = 2;
  Start(upstream.port, limits);
  UniqueFd a = Connect(port_), b = Connect(port_);
  ASSERT_TRUE(a && b);
  UniqueFd sa = upstream.Accept(), sb = upstream.Accept();
  ASSERT_TRUE(sa && sb);
  UniqueFd c = Connect(port_);
  ASSERT_TRUE(c);
  bool eof = false;
  EXPECT_EQ(ReadToEnd(c.get(), &eof), "");
  EXPECT_TRUE(eof) << "the third connection is closed";
  EXPECT_FALSE(upstream.Accept(200ms)) << "and never reaches the upstream";
  // one pair ends; a new connection is taken again
  a.reset();
  sa.reset();
  for (int i = 0; i < 200 && relay_->open_connections() != 1; ++i)
    std::this_thread::sleep_for(10ms);
  UniqueFd d = Connect(port_);
  ASSERT_TRUE(d);
  UniqueFd sd = upstream.Accept();
  ASSERT_TRUE(sd);
  ASSERT_TRUE(WriteAll(d.get(), "x", 1));
  EXPECT_EQ(ReadExactly(sd.get(), 1), "x");
  // the pair that stayed open was never disturbed
  ASSERT_TRUE(WriteAll(sb.get(), "still here", 10));
  EXPECT_EQ(ReadExactly(b.get(), 10), "still here");
  Stop();
  EXPECT_EQ(relay_->counters().refused_over_limit, 1u);
}

TEST_F(RelayTest, ManyConcurrentExchangesEachGetTheirOwnAnswer) {
  Listener upstream;
  Start(upstream.port);
  constexpr int kClients = 40;
  std::thread server([&] {
    std::vector<std::thread> handlers;
    for (int i = 0; i < kClients; ++i) {
      UniqueFd s = upstream.Accept();
      if (!s) break;
      handlers.emplace_back([fd = std::move(s)]() mutable {
        char buf[64];
        const ssize_t n = ::read(fd.get(), buf, sizeof buf);
        if (n > 0) {
          const std::string answer = "re:" + std::string(buf, static_cast<size_t>(n));
          WriteAll(fd.get(), answer.data(), answer.size());
        }
      });
    }
    for (auto& t : handlers) t.join();
  });
  std::vector<std::thread> clients;
  std::atomic<int> right{0};
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      UniqueFd fd = Connect(port_);
      if (!fd) return;
      const std::string ask = "n" + std::to_string(i);
      if (!WriteAll(fd.get(), ask.data(), ask.size())) return;
      bool eof = false;
      if (ReadToEnd(fd.get(), &eof) == "re:" + ask && eof) ++right;
    });
  }
  for (auto& t : clients) t.join();
  server.join();
  EXPECT_EQ(right.load(), kClients);
}

TEST_F(RelayTest, StoppingClosesWhatIsOpen) {
  Listener upstream;
  Start(upstream.port);
  auto [client, server] = ConnectThrough(upstream);
  ASSERT_TRUE(client && server);
  Stop();
  relay_.reset();
  bool eof = false;
  EXPECT_EQ(ReadToEnd(client.get(), &eof), "");
  EXPECT_TRUE(eof);
  EXPECT_EQ(ReadToEnd(server.get(), &eof), "");
  EXPECT_TRUE(eof);
}

TEST(TcpRelayListenTest, AnAddressInUseIsAClearError) {
  Listener taken;
  auto relay = TcpRelay::Listen(Loopback(taken.port), Loopback(1));
  ASSERT_FALSE(relay.has_value());
  EXPECT_NE(relay.error().find("bind 127.0.0.1:" + std::to_string(taken.port)), std::string::npos)
      << relay.error();
}

}  // namespace
}  // namespace deskbox::forward
