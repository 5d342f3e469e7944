// TcpRelay: a single-threaded TCP forwarder (epoll, no fork, no threads). Every connection
// accepted on the listening address is paired with a new connection to the upstream address and
// bytes are copied both ways through two bounded buffers; end of stream in one direction is
// passed on as a half-close. The guest runs it as `deskbox-forward` to publish Chromium's
// DevTools port (127.0.0.1 only) on the guest's network address.
//
// It never parses what it carries. Each direction holds at most `buffer_bytes`; a side whose
// peer does not read is not read from (TCP's window paces it). Connections beyond
// `max_connections` are closed at once. Once one direction has ended, the other has
// `half_close_timeout_ms` to end too, then both sockets close.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <string_view>

namespace deskbox::forward {

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;

  // "IPv4:port" or "[IPv6]:port", numeric only.
  static std::expected<SocketAddress, std::string> Parse(std::string_view text);
  std::string ToString() const;
  uint16_t port() const;
};

struct RelayLimits {
  size_t max_connections = 512;
  size_t buffer_bytes = 64 * 1024;
  int half_close_timeout_ms = 30'000;
  int connect_timeout_ms = 10'000;
};

struct RelayCounters {
  uint64_t accepted = 0;
  uint64_t refused_over_limit = 0;
  uint64_t upstream_failed = 0;
  uint64_t closed = 0;
};

class TcpRelay {
 public:
  // Binds and listens (SO_REUSEADDR); port 0 picks a free port (see listen_address()).
  static std::expected<std::unique_ptr<TcpRelay>, std::string> Listen(const SocketAddress& listen,
                                                                      const SocketAddress& upstream,
                                                                      RelayLimits limits = {});
  ~TcpRelay();
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  SocketAddress listen_address() const;

  // Relays until `stop_fd` turns readable (an eventfd, a signalfd, a pipe's read end). Returns
  // an error only when the loop itself cannot go on (epoll failing).
  std::expected<void, std::string> Run(int stop_fd);

  // Open connection pairs right now, and totals; safe to read only from Run's thread or after
  // Run returns.
  size_t open_connections() const;
  RelayCounters counters() const;

 private:
  struct Impl;
  explicit TcpRelay(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deskbox::forward
