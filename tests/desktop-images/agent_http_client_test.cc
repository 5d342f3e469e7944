// HttpGet against a one-shot server on 127.0.0.1, port 0.
#include "agent/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace deskbox::agent {
namespace {

using namespace std::chrono_literals;

// Accepts one connection, reads the request head, sends `response` (in two pieces), then
// keeps the connection open for `linger` (like DevTools' keep-alive) before closing.
class OneShotServer {
 public:
  explicit OneShotServer(std::string response, std::chrono::milliseconds linger = 0ms)
      : response_(std::move(response)), linger_(linger) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(listen_fd_, 1);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  std::string request() {
    thread_.join();
    thread_ = std::thread([] {});
    return request_;
  }

 private:
  void Serve() {
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    const size_t half = response_.size() / 2;
    ::send(fd, response_.data(), half, MSG_NOSIGNAL);
    std::this_thread::sleep_for(20ms);
    ::send(fd, response_.data() + half, response_.size() - half, MSG_NOSIGNAL);
    std::this_thread::sleep_for(linger_);
    ::close(fd);
  }

  std::string response_;
  std::chrono::milliseconds linger_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::string request_;
  std::thread thread_;
};

TEST(AgentHttpClient, ContentLengthWithoutWaitingForClose) {
  const std::string body = R"({"Browser": "Chrome/120"})";
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body,
                       1500ms);
  const auto start = std::chrono::steady_clock::now();
  auto response = HttpGet("127.0.0.1", server.port(), "/json/version", {.timeout = 2000ms});
  ASSERT_TRUE(response) << response.error();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, body);
  const std::string request = server.request();
  EXPECT_TRUE(request.starts_with("GET /json/version HTTP/1.1\r\n")) << request;
  EXPECT_NE(request.find("Host: 127.0.0.1:"), std::string::npos);
}

TEST(AgentHttpClient, BodyUntilEof) {
  OneShotServer server("HTTP/1.0 404 Not Found\r\n\r\nnope");
  auto response = HttpGet("127.0.0.1", server.port(), "/x");
  ASSERT_TRUE(response) << response.error();
  EXPECT_EQ(response->status, 404);
  EXPECT_EQ(response->body, "nope");
}

TEST(AgentHttpClient, BodyLimit) {
  OneShotServer server("HTTP/1.0 200 OK\r\n\r\n" + std::string(5000, 'x'));
  auto response = HttpGet("127.0.0.1", server.port(), "/", {.max_body_bytes = 1000});
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error(), "body too large");
  OneShotServer declared("HTTP/1.0 200 OK\r\nContent-Length: 99999999\r\n\r\n");
  EXPECT_FALSE(HttpGet("127.0.0.1", declared.port(), "/", {.max_body_bytes = 1000}));
}

TEST(AgentHttpClient, TimesOut) {
  OneShotServer server("", 2000ms);  // never answers
  const auto start = std::chrono::steady_clock::now();
  auto response = HttpGet("127.0.0.1", server.port(), "/", {.timeout = 300ms});
  ASSERT_FALSE(response);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1500ms);
}

TEST(AgentHttpClient, RefusedAndBadAddress) {
  // Bind a port, close it: nothing listens there now.
  uint16_t port;
  {
    OneShotServer gone("");
    port = gone.port();
    HttpGet("127.0.0.1", port, "/", {.timeout = 200ms});
  }
  EXPECT_FALSE(HttpGet("127.0.0.1", port, "/", {.timeout = 500ms}));
  EXPECT_FALSE(HttpGet("not-an-ip", 80, "/"));
}

TEST(AgentHttpClient, ParsesHeads) {
  auto head = ParseHttpHead("HTTP/1.1 200 OK\r\ncontent-length:  12 \r\nX: y\r\n");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_EQ(head->content_length, 12u);
  EXPECT_FALSE(ParseHttpHead("HTTP/2 200\r\n"));
  EXPECT_FALSE(ParseHttpHead("HTTP/1.1 2x0 OK\r\n"));
  EXPECT_FALSE(ParseHttpHead("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n"));
  EXPECT_FALSE(ParseHttpHead("garbage"));
  EXPECT_TRUE(ParseHttpHead("HTTP/1.0 204\r\n"));
}

}  // namespace
}  // namespace deskbox::agent
