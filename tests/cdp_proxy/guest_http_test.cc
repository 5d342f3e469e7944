// CdpProxy::GuestHttp against a scripted DevTools server on loopback: an answer, and each kind
// of failure by its code (no usable HTTP, the answer cut short, silence, a bad target, a socket
// that cannot send).
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <optional>

#include "cdp_proxy/cdp_proxy.h"
#include "recorder/fake_event_sink.h"

namespace deskbox::cdp_proxy {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;
using namespace std::chrono_literals;
using Result = std::expected<GuestHttpAnswer, Error>;

// Reads each request's head, then sends `answer` (nothing when it is nullopt) and closes.
class FakeDevTools {
 public:
  FakeDevTools(asio::io_context& io, std::optional<std::string> answer)
      : acceptor_(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
        answer_(std::move(answer)) {
    asio::co_spawn(io, Serve(), asio::detached);
  }
  tcp::endpoint endpoint() const { return acceptor_.local_endpoint(); }

 private:
  asio::awaitable<void> Serve() {
    for (;;) {
      boost::system::error_code ec;
      tcp::socket s =
          co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      std::string head;
      co_await asio::async_read_until(s, asio::dynamic_buffer(head), "\r\n\r\n",
                                      asio::redirect_error(asio::use_awaitable, ec));
      if (!answer_) {
        held_.push_back(std::move(s));  // never answers, never closes
        continue;
      }
      co_await asio::async_write(s, asio::buffer(*answer_),
                                 asio::redirect_error(asio::use_awaitable, ec));
      s.shutdown(tcp::socket::shutdown_both, ec);
    }
  }
  tcp::acceptor acceptor_;
  std::optional<std::string> answer_;
  std::vector<tcp::socket> held_;
};

// Connects to the fake server, or hands out a socket that was never connected.
class LoopbackDialer final : public GuestDialer {
 public:
  explicit LoopbackDialer(asio::io_context& io) : io_(io) {}
  asio::awaitable<std::expected<tcp::socket, Error>> DialCdp(const std::string&) override {
    tcp::socket s(io_);
    boost::system::error_code ec;
    if (!to) {
      s.open(tcp::v4(), ec);
      co_return std::move(s);
    }
    co_await s.async_connect(*to, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return std::unexpected(Error{ErrorCode::kGuest, ec.message()});
    co_return std::move(s);
  }
  std::optional<tcp::endpoint> to;

 private:
  asio::io_context& io_;
};

class GuestHttpTest : public ::testing::Test {
 protected:
  Result Get(const std::string& target) {
    std::optional<Result> result;
    asio::co_spawn(
        io_,
        [&]() -> asio::awaitable<void> {
          result = co_await proxy_.GuestHttp("sb-1", http::verb::get, target);
        },
        [](std::exception_ptr e) {
          if (e) std::rethrow_exception(e);
        });
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!result && std::chrono::steady_clock::now() < deadline) io_.run_one_for(50ms);
    if (!result) return std::unexpected(Error{ErrorCode::kIo, "test: GuestHttp did not return"});
    return *result;
  }
  void Serve(std::optional<std::string> answer) {
    server_.emplace(io_, std::move(answer));
    dialer_.to = server_->endpoint();
  }

  asio::io_context io_;
  LoopbackDialer dialer_{io_};
  recorder::FakeEventSink events_;
  CdpProxy proxy_{io_.get_executor(), dialer_, events_, {.guest_timeout = 1s}};
  std::optional<FakeDevTools> server_;
};

TEST_F(GuestHttpTest, AnAnswer) {
  Serve("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]");
  auto r = Get("/json/list");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "[]");
}

TEST_F(GuestHttpTest, AnAnswerThatIsNotHttpIsTheGuests) {
  Serve("SSH-2.0-OpenSSH_9.2\r\n\r\n");
  auto r = Get("/json/list");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kGuest) << r.error().message;
  EXPECT_TRUE(r.error().message.starts_with("the guest's DevTools: not an HTTP answer"))
      << r.error().message;
}

TEST_F(GuestHttpTest, AnAnswerCutShortIsClosed) {
  Serve("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n[");
  auto r = Get("/json/list");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kClosed) << r.error().message;
  EXPECT_EQ(r.error().message,
            "the guest's DevTools: the connection ended before the whole answer");
}

TEST_F(GuestHttpTest, NoAnswerTimesOut) {
  Serve(std::nullopt);
  auto r = Get("/json/version");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kTimeout) << r.error().message;
  EXPECT_EQ(r.error().message, "the guest's DevTools: no whole answer in 1000 ms");
}

TEST_F(GuestHttpTest, ATargetThatIsNotAPathIsRefused) {
  Serve("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]");
  auto r = Get("json/list");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kBadTarget) << r.error().message;
  EXPECT_EQ(r.error().message, "the guest's DevTools: the request target is not a plain path");
}

TEST_F(GuestHttpTest, ASocketThatCannotSendIsAnIoError) {
  auto r = Get("/json/list");  // the dialer's socket was never connected
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::kIo) << r.error().message;
  EXPECT_TRUE(r.error().message.starts_with("the guest's DevTools: sending the request: "))
      << r.error().message;
}

}  // namespace
}  // namespace deskbox::cdp_proxy
