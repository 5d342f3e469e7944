// vmhost::DevToolsHttp against a scripted server on 127.0.0.1:0 standing in for a guest's
// Chromium: what it sends, how it frames answers (Content-Length, chunked, to the connection's
// end), and that every hostile answer — too large, too slow, not HTTP — is a typed error.
#include "vmhost/devtools_http.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <optional>
#include <string>

#include "common/slot_network.h"

namespace deskbox::vmhost {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;
using namespace std::chrono_literals;
using Code = DevToolsHttpError::Code;
using Result = std::expected<DevToolsAnswer, DevToolsHttpError>;

// What the server does once it has read the request's head.
struct Script {
  std::string answer;                    // bytes it writes
  bool close = true;                     // then closes; else holds the connection open, silent
  std::chrono::milliseconds trickle{0};  // writes one byte per this interval instead
};

class DevToolsHttpTest : public ::testing::Test {
 protected:
  Result Ask(Script script, DevToolsHttpLimits limits = {}, std::string target = "/json/version",
             http::verb method = http::verb::get) {
    asio::io_context io;
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    const uint16_t port = acceptor.local_endpoint().port();
    asio::steady_timer hold(io, asio::steady_timer::time_point::max());
    bool client_done = false;
    std::optional<Result> result;

    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          boost::system::error_code ec;
          tcp::socket peer =
              co_await acceptor.async_accept(asio::redirect_error(asio::use_awaitable, ec));
          if (ec) co_return;
          char buf[4096];
          while (request_.find("\r\n\r\n") == std::string::npos) {
            size_t n = co_await peer.async_read_some(asio::buffer(buf),
                                                     asio::redirect_error(asio::use_awaitable, ec));
            request_.append(buf, n);
            if (ec) co_return;
          }
          if (script.trickle.count() > 0) {
            asio::steady_timer pause(io);
            for (char c : script.answer) {
              if (client_done) break;
              co_await asio::async_write(peer, asio::buffer(&c, 1),
                                         asio::redirect_error(asio::use_awaitable, ec));
              if (ec) break;
              pause.expires_after(script.trickle);
              co_await pause.async_wait(asio::redirect_error(asio::use_awaitable, ec));
            }
          } else {
            co_await asio::async_write(peer, asio::buffer(script.answer),
                                       asio::redirect_error(asio::use_awaitable, ec));
          }
          if (!script.close && !client_done)
            co_await hold.async_wait(asio::redirect_error(asio::use_awaitable, ec));
        },
        asio::detached);

    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
          tcp::socket s(io);
          co_await s.async_connect({asio::ip::make_address("127.0.0.1"), port},
                                   asio::use_awaitable);
          started_ = std::chrono::steady_clock::now();
          result = co_await DevToolsHttp(std::move(s), method, target, limits);
          took_ = std::chrono::steady_clock::now() - started_;
          client_done = true;
          hold.cancel();
          acceptor.close();
        },
        asio::detached);

    io.run_for(30s);
    if (!result) {
      ADD_FAILURE() << "no result";
      return std::unexpected(DevToolsHttpError{Code::kReceive, "test: no result"});
    }
    return *result;
  }

  std::string request_;  // what the server read
  std::chrono::steady_clock::time_point started_;
  std::chrono::steady_clock::duration took_{};
};

TEST_F(DevToolsHttpTest, SendsAFixedHostAndReadsByContentLength) {
  auto r = Ask(
      {.answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n"
                 "{\"Browser\":1}"});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->status, 200u);
  EXPECT_EQ(r->body, "{\"Browser\":1}");
  EXPECT_TRUE(request_.starts_with("GET /json/version HTTP/1.1\r\n")) << request_;
  EXPECT_NE(request_.find("Host: " + slot_network::GuestCdpHostPort() + "\r\n"), std::string::npos)
      << request_;
  EXPECT_NE(request_.find("Host: 10.88.0.2:9222\r\n"), std::string::npos) << request_;
  EXPECT_NE(request_.find("Connection: close\r\n"), std::string::npos) << request_;
}

TEST_F(DevToolsHttpTest, AnswerEndsAtContentLengthOnAnOpenConnection) {
  // Chromium may keep the connection open: the answer must not wait for its end.
  auto r = Ask({.answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]", .close = false},
               {.timeout = 5s}, "/json/list");
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->body, "[]");
  EXPECT_LT(took_, 2s);
}

TEST_F(DevToolsHttpTest, MethodAndStatusPassThrough) {
  auto r = Ask({.answer = "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nNo target"}, {},
               "/json/new?about:blank", http::verb::put);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->status, 404u);
  EXPECT_EQ(r->body, "No target");
  EXPECT_TRUE(request_.starts_with("PUT /json/new?about:blank HTTP/1.1\r\n")) << request_;
}

TEST_F(DevToolsHttpTest, NoContentLengthReadsToTheConnectionsEnd) {
  auto r = Ask({.answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nTarget is closing"});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->body, "Target is closing");
}

TEST_F(DevToolsHttpTest, Chunked) {
  auto r = Ask({.answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5\r\n[{\"a\"\r\n4;ext=1\r\n:1}]\r\n0\r\n\r\n",
                .close = false},
               {.timeout = 5s});
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->body, "[{\"a\":1}]");
  EXPECT_LT(took_, 2s);
}

TEST_F(DevToolsHttpTest, BodyOverTheLimitByContentLength) {
  auto r =
      Ask({.answer = "HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + std::string(2000, 'x')},
          {.body_bytes = 1000});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::kBodyTooLarge) << r.error().message;
}

TEST_F(DevToolsHttpTest, BodyOverTheLimitToTheConnectionsEnd) {
  auto r =
      Ask({.answer = "HTTP/1.1 200 OK\r\n\r\n" + std::string(5000, 'x')}, {.body_bytes = 1000});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::kBodyTooLarge) << r.error().message;
}

TEST_F(DevToolsHttpTest, BodyOverTheLimitInChunks) {
  std::string chunks;
  for (int i = 0; i < 20; ++i) chunks += "64\r\n" + std::string(100, 'x') + "\r\n";
  auto r = Ask(
      {.answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + "0\r\n\r\n"},
      {.body_bytes = 1000});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::kBodyTooLarge) << r.error().message;
}

TEST_F(DevToolsHttpTest, HeadOverTheLimit) {
  auto r = Ask({.answer = "HTTP/1.1 200 OK\r\nX-Filler: " + std::string(4000, 'y') +
                          "\r\nContent-Length: 0\r\n\r\n"},
               {.header_bytes = 1024});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::kHeaderTooLarge) << r.error().message;
}

TEST_F(DevToolsHttpTest, SilentServerTimesOut) {
  auto r = Ask({.answer = "", .close = false}, {.timeout = 200ms});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::kTimeout) << r.error().message;
  EXPECT_GE(took_, 190ms);
  EXPECT_LT(took_, 5s);
}

TEST_F(DevToolsHttpTest, TrickleCannotOutlastTheDeadline) {
  // Each byte comes well within any per-read timeout; the deadline is for the whole answer.
  auto r = Ask({.answer = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + std::string(100, 'z'),
                .trickle = 20ms},
               {.timeout = 300ms});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::kTimeout) << r.error().message;
  EXPECT_LT(took_, 3s);
}

TEST_F(DevToolsHttpTest, GarbageStatusLine) {
  for (const char* answer :
       {"SSH-2.0-OpenSSH_9.2\r\n\r\n", "HTTP/1.1 2x0 OK\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1200 OK\r\n\r\n", "\x16\x03\x01\x02\x05\x01\xfc\r\n\r\n"}) {
    request_.clear();
    auto r = Ask({.answer = answer});
    ASSERT_FALSE(r.has_value()) << answer;
    EXPECT_EQ(r.error().code, Code::kMalformed) << answer << ": " << r.error().message;
  }
}

TEST_F(DevToolsHttpTest, BadChunkFraming) {
  auto r = Ask(
      {.answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, Code::kMalformed) << r.error().message;
}

TEST_F(DevToolsHttpTest, ConnectionEndsEarly) {
  auto cut = Ask({.answer = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this"});
  ASSERT_FALSE(cut.has_value());
  EXPECT_EQ(cut.error().code, Code::kReceive) << cut.error().message;
  request_.clear();
  auto nothing = Ask({.answer = ""});
  ASSERT_FALSE(nothing.has_value());
  EXPECT_EQ(nothing.error().code, Code::kReceive) << nothing.error().message;
}

TEST_F(DevToolsHttpTest, TargetThatWouldBreakTheRequestIsRefusedUnsent) {
  for (const char* target : {"/json/new?a b", "/json\r\nX-Evil: 1", "json/list", "", "/\x7f"}) {
    request_.clear();
    auto r = Ask({.answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"}, {}, target);
    ASSERT_FALSE(r.has_value()) << target;
    EXPECT_EQ(r.error().code, Code::kInvalidTarget) << target;
    EXPECT_EQ(request_, "") << "nothing was sent";
  }
}

}  // namespace
}  // namespace deskbox::vmhost
