#include "agent/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cstring>

#include "agent/unique_fd.h"

namespace deskbox::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Milliseconds left until `deadline`, at least 0.
int MsLeft(SteadyClock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 60'000));
}

bool WaitFor(int fd, short events, SteadyClock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, MsLeft(deadline));
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

bool EqualsIgnoreCase(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

}  // namespace

std::expected<HttpHead, std::string> ParseHttpHead(std::string_view head) {
  const size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  // "HTTP/1.1 200 OK"
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return std::unexpected("bad status line");
  }
  HttpHead parsed;
  const char* first = status_line.data() + 9;
  auto [ptr, ec] = std::from_chars(first, first + 3, parsed.status);
  if (ec != std::errc() || ptr != first + 3 || parsed.status < 100 || parsed.status > 599) {
    return std::unexpected("bad status code");
  }
  std::string_view rest = eol == std::string_view::npos ? "" : head.substr(eol + 2);
  while (!rest.empty()) {
    const size_t end = rest.find("\r\n");
    std::string_view line = rest.substr(0, end);
    rest = end == std::string_view::npos ? "" : rest.substr(end + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    if (EqualsIgnoreCase(Trim(line.substr(0, colon)), "content-length")) {
      std::string_view value = Trim(line.substr(colon + 1));
      size_t length = 0;
      auto [p, e] = std::from_chars(value.data(), value.data() + value.size(), length);
      if (e != std::errc() || p != value.data() + value.size()) {
        return std::unexpected("bad Content-Length");
      }
      parsed.content_length = length;
    }
  }
  return parsed;
}

std::expected<HttpResponse, std::string> HttpGet(std::string_view ipv4, uint16_t port,
                                                 std::string_view path,
                                                 const HttpGetOptions& options) {
  const auto deadline = SteadyClock::now() + options.timeout;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  const std::string host(ipv4);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    return std::unexpected("bad address");
  }
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return std::unexpected(std::string("socket: ") + std::strerror(errno));
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return std::unexpected(std::string("connect: ") + std::strerror(errno));
    if (!WaitFor(fd.get(), POLLOUT, deadline)) return std::unexpected("connect: timed out");
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return std::unexpected(std::string("connect: ") + std::strerror(err));
  }

  std::string request = "GET ";
  request += path;
  // HTTP/1.1: Chromium's DevTools server does not answer HTTP/1.0 requests.
  request += " HTTP/1.1\r\nHost: " + host + ":" + std::to_string(port) +
             "\r\nConnection: close\r\n\r\n";
  for (size_t sent = 0; sent < request.size();) {
    const ssize_t n =
        ::send(fd.get(), request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!WaitFor(fd.get(), POLLOUT, deadline)) return std::unexpected("send: timed out");
    } else {
      return std::unexpected(std::string("send: ") + std::strerror(errno));
    }
  }

  std::string data;
  std::optional<HttpHead> head;
  size_t body_start = 0;
  const size_t max_total = options.max_header_bytes + options.max_body_bytes;
  char buf[16 * 1024];
  for (;;) {
    if (head && head->content_length && data.size() - body_start >= *head->content_length) break;
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) {
      data.append(buf, static_cast<size_t>(n));
      if (!head) {
        const size_t end = data.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (data.size() > options.max_header_bytes) return std::unexpected("header too large");
          continue;
        }
        auto parsed = ParseHttpHead(std::string_view(data).substr(0, end + 2));
        if (!parsed) return std::unexpected(parsed.error());
        head = *parsed;
        body_start = end + 4;
        if (head->content_length && *head->content_length > options.max_body_bytes) {
          return std::unexpected("body too large");
        }
      }
      if (data.size() - body_start > options.max_body_bytes || data.size() > max_total) {
        return std::unexpected("body too large");
      }
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!WaitFor(fd.get(), POLLIN, deadline)) return std::unexpected("response: timed out");
      continue;
    }
    return std::unexpected(std::string("recv: ") + std::strerror(errno));
  }
  if (!head) return std::unexpected("connection closed before the response head");
  HttpResponse response;
  response.status = head->status;
  response.body = data.substr(body_start);
  if (head->content_length) {
    if (response.body.size() < *head->content_length) return std::unexpected("truncated body");
    response.body.resize(*head->content_length);
  }
  return response;
}

}  // namespace deskbox::agent
