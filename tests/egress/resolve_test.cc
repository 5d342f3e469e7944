// Egress::Resolve against resolvers on loopback: an answer, and each kind of failure by its
// code (a closed port, REFUSED, SERVFAIL, silence, no resolver, no uplink socket, shutdown).
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <optional>

#include "egress/egress.h"
#include "recorder/fake_event_sink.h"

namespace deskbox::egress {
namespace {

namespace asio = boost::asio;
using asio::ip::udp;
using namespace std::chrono_literals;
using Result = std::expected<dns::Response, Error>;

// Unconnected sockets of this netns, standing in for the uplink netns's. Hold() makes every
// Open wait until Release(); Empty() makes it answer with no socket.
class LocalUplink final : public UplinkSockets {
 public:
  explicit LocalUplink(asio::io_context& io) : gate_(io) {}
  asio::awaitable<std::expected<std::vector<UniqueFd>, Error>> Open(bool ipv6, bool udp,
                                                                    unsigned count) override {
    if (held_) {
      boost::system::error_code ec;
      co_await gate_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    std::vector<UniqueFd> fds;
    for (unsigned i = 0; i < count && !empty_; ++i)
      fds.emplace_back(
          ::socket(ipv6 ? AF_INET6 : AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC, 0));
    co_return fds;
  }
  void Hold() {
    held_ = true;
    gate_.expires_at(asio::steady_timer::time_point::max());
  }
  void Release() {
    held_ = false;
    gate_.cancel();
  }
  void Empty() { empty_ = true; }

 private:
  asio::steady_timer gate_;
  bool held_ = false;
  bool empty_ = false;
};

// A resolver on 127.0.0.1 that answers every query with `rcode` (and 192.0.2.1 for NOERROR),
// or never answers.
class FakeResolver {
 public:
  FakeResolver(asio::io_context& io, std::optional<uint8_t> rcode)
      : socket_(io, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), rcode_(rcode) {
    asio::co_spawn(io, Serve(), asio::detached);
  }
  ~FakeResolver() {
    boost::system::error_code ec;
    socket_.close(ec);
  }
  udp::endpoint endpoint() const { return socket_.local_endpoint(); }

 private:
  asio::awaitable<void> Serve() {
    std::vector<uint8_t> buf(dns::kMaxUdpMessage);
    for (;;) {
      udp::endpoint from;
      boost::system::error_code ec;
      size_t n = co_await socket_.async_receive_from(asio::buffer(buf), from,
                                                     asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      auto q = dns::ParseQuery(std::span(buf.data(), n));
      if (!q || !rcode_) continue;
      std::vector<dns::Record> records;
      if (*rcode_ == dns::kNoError) records.push_back({asio::ip::make_address("192.0.2.1"), 60});
      auto answer = dns::BuildAnswer(*q, *rcode_, records);
      co_await socket_.async_send_to(asio::buffer(answer), from,
                                     asio::redirect_error(asio::use_awaitable, ec));
    }
  }
  udp::socket socket_;
  std::optional<uint8_t> rcode_;
};

// A loopback port nothing listens on: the kernel answers with ICMP port unreachable.
udp::endpoint ClosedPort(asio::io_context& io) {
  udp::socket s(io, udp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  return s.local_endpoint();
}

class ResolveTest : public ::testing::Test {
 protected:
  std::unique_ptr<Egress> MakeEgress(std::vector<udp::endpoint> resolvers) {
    EgressOptions o;
    o.resolvers = std::move(resolvers);
    o.dns_timeout = 200ms;
    return std::make_unique<Egress>(io_.get_executor(), uplink_, events_, std::move(o));
  }
  // Starts egress.Resolve; Finish() runs the io_context until it has returned.
  void Start(Egress& egress) {
    result_.reset();
    asio::co_spawn(
        io_,
        [this, &egress]() -> asio::awaitable<void> {
          result_ = co_await egress.Resolve("example.com", dns::kTypeA);
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
  }
  Result Finish() {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!result_ && std::chrono::steady_clock::now() < deadline) io_.run_one_for(50ms);
    if (!result_) return std::unexpected(Error{ErrorCode::kIo, "test: Resolve did not return"});
    return *result_;
  }
  Result Resolve(Egress& egress) {
    Start(egress);
    return Finish();
  }

  asio::io_context io_;
  LocalUplink uplink_{io_};
  recorder::FakeEventSink events_;
  std::optional<Result> result_;
};

TEST_F(ResolveTest, AnAnswer) {
  FakeResolver resolver(io_, dns::kNoError);
  auto egress = MakeEgress({resolver.endpoint()});
  auto r = Resolve(*egress);
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->records.size(), 1u);
  EXPECT_EQ(r->records[0].address.to_string(), "192.0.2.1");
}

TEST_F(ResolveTest, AClosedResolverPortIsRefused) {
  auto egress = MakeEgress({ClosedPort(io_)});
  auto r = Resolve(*egress);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kRefused) << r.error().message;
  EXPECT_TRUE(r.error().message.starts_with("resolver 127.0.0.1: ")) << r.error().message;
}

TEST_F(ResolveTest, AnAnswerOfRefusedIsRefused) {
  FakeResolver resolver(io_, dns::kRefused);
  auto egress = MakeEgress({resolver.endpoint()});
  auto r = Resolve(*egress);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kRefused) << r.error().message;
  EXPECT_EQ(r.error().message, "resolver 127.0.0.1 answered rcode 5");
}

TEST_F(ResolveTest, AServerFailureIsAnUpstreamError) {
  FakeResolver resolver(io_, dns::kServFail);
  auto egress = MakeEgress({resolver.endpoint()});
  auto r = Resolve(*egress);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUpstream) << r.error().message;
  EXPECT_EQ(r.error().message, "resolver 127.0.0.1 answered rcode 2");
}

TEST_F(ResolveTest, NoResolverIsAnUpstreamError) {
  auto egress = MakeEgress({});
  auto r = Resolve(*egress);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kUpstream);
  EXPECT_EQ(r.error().message, "no upstream resolver configured");
}

TEST_F(ResolveTest, ASilentResolverTimesOut) {
  FakeResolver resolver(io_, std::nullopt);
  auto egress = MakeEgress({resolver.endpoint()});
  auto r = Resolve(*egress);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout) << r.error().message;
  EXPECT_EQ(r.error().message, "resolver 127.0.0.1 did not answer in 200 ms");
}

TEST_F(ResolveTest, NoUplinkSocketIsAnIoError) {
  uplink_.Empty();
  FakeResolver resolver(io_, dns::kNoError);
  auto egress = MakeEgress({resolver.endpoint()});
  auto r = Resolve(*egress);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kIo);
  EXPECT_EQ(r.error().message, "no uplink socket");
}

TEST_F(ResolveTest, DestroyingTheEgressMeanwhileIsStopping) {
  FakeResolver resolver(io_, dns::kNoError);
  auto egress = MakeEgress({resolver.endpoint()});
  uplink_.Hold();
  Start(*egress);
  io_.run_for(50ms);  // Resolve now waits for an uplink socket
  ASSERT_FALSE(result_);
  egress.reset();
  uplink_.Release();
  auto r = Finish();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kStopping) << r.error().message;
}

}  // namespace
}  // namespace deskbox::egress
