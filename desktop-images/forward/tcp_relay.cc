#include "forward/tcp_relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstring>
#include <list>
#include <vector>

#include "common/unique_fd.h"

namespace deskbox::forward {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Errno(std::string_view what) {
  return std::string(what) + ": " + std::strerror(errno);
}

// A bounded byte buffer: filled at `end`, drained from `begin`.
class Buffer {
 public:
  explicit Buffer(size_t capacity) : data_(new char[capacity]), capacity_(capacity) {}
  size_t size() const { return end_ - begin_; }
  bool empty() const { return begin_ == end_; }
  bool has_space() const { return end_ < capacity_ || begin_ > 0; }
  // Room to read into, after moving what is buffered to the front if needed.
  std::pair<char*, size_t> WritableSpan() {
    if (end_ == capacity_ && begin_ > 0) {
      std::memmove(data_.get(), data_.get() + begin_, size());
      end_ -= begin_;
      begin_ = 0;
    }
    return {data_.get() + end_, capacity_ - end_};
  }
  void Produced(size_t n) { end_ += n; }
  std::pair<const char*, size_t> ReadableSpan() const { return {data_.get() + begin_, size()}; }
  void Consumed(size_t n) {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }

 private:
  std::unique_ptr<char[]> data_;
  size_t capacity_;
  size_t begin_ = 0;
  size_t end_ = 0;
};

struct Connection;

struct Side {
  Connection* connection = nullptr;
  UniqueFd fd;
  bool read_eof = false;    // this side sent FIN
  bool write_shut = false;  // we sent FIN to this side
  uint32_t registered = 0;  // epoll mask in effect; 0 = not in the epoll set
};

struct Connection {
  Connection(size_t buffer_bytes) : to_upstream(buffer_bytes), to_client(buffer_bytes) {}
  Side client;
  Side upstream;
  Buffer to_upstream;  // read from client, written to upstream
  Buffer to_client;    // read from upstream, written to client
  bool connecting = true;
  bool dead = false;
  int64_t deadline_ms = 0;  // connect or half-close deadline; 0 = none
  std::list<std::unique_ptr<Connection>>::iterator self;
};

}  // namespace

std::expected<SocketAddress, std::string> SocketAddress::Parse(std::string_view text) {
  SocketAddress out;
  std::string host;
  std::string_view port_text;
  const bool bracketed = text.starts_with('[');
  if (bracketed) {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return std::unexpected("address '" + std::string(text) + "': expected [IPv6]:port");
    }
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return std::unexpected("address '" + std::string(text) + "': expected IPv4:port");
    }
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
  }
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port_text.empty() ||
      port > 65535) {
    return std::unexpected("address '" + std::string(text) + "': bad port");
  }
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out.storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.storage);
  if (!bracketed && ::inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(port));
    out.length = sizeof(sockaddr_in);
  } else if (bracketed && ::inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(port));
    out.length = sizeof(sockaddr_in6);
  } else {
    return std::unexpected("address '" + std::string(text) + "': not a numeric IP address");
  }
  return out;
}

std::string SocketAddress::ToString() const {
  char host[INET6_ADDRSTRLEN] = {};
  if (storage.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&storage);
    ::inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&storage);
  ::inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6->sin6_port));
}

uint16_t SocketAddress::port() const {
  if (storage.ss_family == AF_INET)
    return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
}

struct TcpRelay::Impl {
  SocketAddress upstream;
  RelayLimits limits;
  UniqueFd listen_fd;
  UniqueFd epoll_fd;
  std::list<std::unique_ptr<Connection>> connections;
  std::vector<std::unique_ptr<Connection>> graveyard;  // closed during this batch of events
  RelayCounters counters;
  bool listening_registered = false;
  int64_t accept_resume_ms = 0;  // accepting paused (out of descriptors) until then
  // epoll_event.data.ptr values that are not Sides
  char listen_tag = 0;
  char stop_tag = 0;

  void SetInterest(Side& side, uint32_t mask) {
    if (mask == side.registered) return;
    epoll_event ev{};
    ev.events = mask;
    ev.data.ptr = &side;
    const int op = side.registered == 0 ? EPOLL_CTL_ADD : mask == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    if (::epoll_ctl(epoll_fd.get(), op, side.fd.get(), &ev) == 0) side.registered = mask;
  }

  void Close(Connection& c) {
    if (c.dead) return;
    c.dead = true;
    // closing removes them from the epoll set
    c.client.fd.reset();
    c.upstream.fd.reset();
    c.client.registered = c.upstream.registered = 0;
    ++counters.closed;
    graveyard.push_back(std::move(*c.self));
    connections.erase(c.self);
  }

  void Accept() {
    for (;;) {
      UniqueFd client(::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
      if (!client) {
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // the listening socket stays readable: stop polling it for a while rather than spin
          accept_resume_ms = NowMs() + 200;
          PauseListening();
        }
        return;  // EAGAIN, or a connection that went away before we took it
      }
      ++counters.accepted;
      if (connections.size() >= limits.max_connections) {
        ++counters.refused_over_limit;
        continue;  // closes it
      }
      UniqueFd up(
          ::socket(upstream.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
      if (!up) {
        ++counters.upstream_failed;
        continue;
      }
      const int one = 1;
      ::setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::setsockopt(up.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      const int rc = ::connect(up.get(), reinterpret_cast<const sockaddr*>(&upstream.storage),
                               upstream.length);
      if (rc != 0 && errno != EINPROGRESS) {
        ++counters.upstream_failed;
        continue;  // e.g. nothing listens upstream yet: the client sees its connection close
      }
      auto owned = std::make_unique<Connection>(limits.buffer_bytes);
      Connection& c = *owned;
      c.client.connection = c.upstream.connection = &c;
      c.client.fd = std::move(client);
      c.upstream.fd = std::move(up);
      c.connecting = rc != 0;
      if (c.connecting) c.deadline_ms = NowMs() + limits.connect_timeout_ms;
      connections.push_front(std::move(owned));
      c.self = connections.begin();
      Update(c);
    }
  }

  void PauseListening() {
    if (!listening_registered) return;
    ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, listen_fd.get(), nullptr);
    listening_registered = false;
  }

  void ResumeListening() {
    if (listening_registered) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = &listen_tag;
    if (::epoll_ctl(epoll_fd.get(), EPOLL_CTL_ADD, listen_fd.get(), &ev) == 0)
      listening_registered = true;
  }

  // Reads what `from` sent into `buffer`. False: the connection is broken.
  bool ReadInto(Side& from, Buffer& buffer) {
    while (!from.read_eof && buffer.has_space()) {
      auto [data, room] = buffer.WritableSpan();
      const ssize_t n = ::read(from.fd.get(), data, room);
      if (n > 0) {
        buffer.Produced(static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        from.read_eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    return true;
  }

  // Writes `buffer` to `to`. False: the connection is broken.
  bool WriteFrom(Buffer& buffer, Side& to) {
    while (!buffer.empty()) {
      auto [data, size] = buffer.ReadableSpan();
      const ssize_t n = ::send(to.fd.get(), data, size, MSG_NOSIGNAL);
      if (n > 0) {
        buffer.Consumed(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      return false;
    }
    return true;
  }

  void Handle(Side& side, uint32_t events) {
    Connection& c = *side.connection;
    if (c.dead) return;
    const bool is_client = &side == &c.client;
    if (!is_client && c.connecting) {
      int error = 0;
      socklen_t len = sizeof error;
      if (::getsockopt(side.fd.get(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
      if (error != 0) {
        ++counters.upstream_failed;
        Close(c);
        return;
      }
      if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) == 0) return;
      c.connecting = false;
      c.deadline_ms = 0;
    }
    if (events & EPOLLERR) {
      Close(c);
      return;
    }
    Buffer& inbound = is_client ? c.to_upstream : c.to_client;
    Buffer& outbound = is_client ? c.to_client : c.to_upstream;
    if ((events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)) && !ReadInto(side, inbound)) {
      Close(c);
      return;
    }
    if ((events & (EPOLLOUT | EPOLLHUP)) && !WriteFrom(outbound, side)) {
      Close(c);
      return;
    }
    Update(c);
  }

  // Moves bytes that can move now, passes on ends of stream, closes a finished pair and sets
  // what to wait for on each side.
  void Update(Connection& c) {
    if (c.dead) return;
    if (!c.connecting) {
      if (!WriteFrom(c.to_upstream, c.upstream) || !WriteFrom(c.to_client, c.client)) {
        Close(c);
        return;
      }
      if (c.client.read_eof && c.to_upstream.empty() && !c.upstream.write_shut) {
        ::shutdown(c.upstream.fd.get(), SHUT_WR);
        c.upstream.write_shut = true;
      }
      if (c.upstream.read_eof && c.to_client.empty() && !c.client.write_shut) {
        ::shutdown(c.client.fd.get(), SHUT_WR);
        c.client.write_shut = true;
      }
      if (c.client.write_shut && c.upstream.write_shut) {
        Close(c);
        return;
      }
      if ((c.client.write_shut || c.upstream.write_shut) && c.deadline_ms == 0) {
        c.deadline_ms = NowMs() + limits.half_close_timeout_ms;
      }
    } else if (c.client.read_eof && c.to_upstream.empty()) {
      // the client gave up before the upstream answered
      Close(c);
      return;
    }
    uint32_t client_mask = 0, upstream_mask = 0;
    if (!c.client.read_eof && c.to_upstream.has_space()) client_mask |= EPOLLIN | EPOLLRDHUP;
    if (!c.to_client.empty()) client_mask |= EPOLLOUT;
    if (c.connecting) {
      upstream_mask = EPOLLOUT;
    } else {
      if (!c.upstream.read_eof && c.to_client.has_space()) upstream_mask |= EPOLLIN | EPOLLRDHUP;
      if (!c.to_upstream.empty()) upstream_mask |= EPOLLOUT;
    }
    SetInterest(c.client, client_mask);
    SetInterest(c.upstream, upstream_mask);
  }

  // Closes pairs whose connect or half-close time ran out; returns the epoll timeout until the
  // next deadline (-1: none).
  int SweepDeadlines() {
    const int64_t now = NowMs();
    int64_t next = 0;
    for (auto it = connections.begin(); it != connections.end();) {
      Connection& c = **it++;
      if (c.deadline_ms == 0) continue;
      if (c.deadline_ms <= now) {
        if (c.connecting) ++counters.upstream_failed;
        Close(c);
        continue;
      }
      if (next == 0 || c.deadline_ms < next) next = c.deadline_ms;
    }
    if (!listening_registered) {
      if (accept_resume_ms <= now) {
        ResumeListening();
      } else if (next == 0 || accept_resume_ms < next) {
        next = accept_resume_ms;
      }
    }
    return next == 0 ? -1 : static_cast<int>(std::min<int64_t>(next - now, 60'000));
  }
};

TcpRelay::TcpRelay(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpRelay::~TcpRelay() = default;

std::expected<std::unique_ptr<TcpRelay>, std::string> TcpRelay::Listen(
    const SocketAddress& listen, const SocketAddress& upstream, RelayLimits limits) {
  if (limits.buffer_bytes == 0 || limits.max_connections == 0) {
    return std::unexpected("relay limits must be positive");
  }
  auto impl = std::make_unique<Impl>();
  impl->upstream = upstream;
  impl->limits = limits;
  impl->listen_fd.reset(
      ::socket(listen.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!impl->listen_fd) return std::unexpected(Errno("socket"));
  const int one = 1;
  ::setsockopt(impl->listen_fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(impl->listen_fd.get(), reinterpret_cast<const sockaddr*>(&listen.storage),
             listen.length) != 0) {
    return std::unexpected(Errno("bind " + listen.ToString()));
  }
  if (::listen(impl->listen_fd.get(), 128) != 0) return std::unexpected(Errno("listen"));
  impl->epoll_fd.reset(::epoll_create1(EPOLL_CLOEXEC));
  if (!impl->epoll_fd) return std::unexpected(Errno("epoll_create1"));
  impl->ResumeListening();
  if (!impl->listening_registered) return std::unexpected(Errno("epoll_ctl"));
  return std::unique_ptr<TcpRelay>(new TcpRelay(std::move(impl)));
}

SocketAddress TcpRelay::listen_address() const {
  SocketAddress out;
  out.length = sizeof out.storage;
  ::getsockname(impl_->listen_fd.get(), reinterpret_cast<sockaddr*>(&out.storage), &out.length);
  return out;
}

std::expected<void, std::string> TcpRelay::Run(int stop_fd) {
  Impl& s = *impl_;
  epoll_event stop{};
  stop.events = EPOLLIN;
  stop.data.ptr = &s.stop_tag;
  if (::epoll_ctl(s.epoll_fd.get(), EPOLL_CTL_ADD, stop_fd, &stop) != 0) {
    return std::unexpected(Errno("epoll_ctl stop fd"));
  }
  std::vector<epoll_event> events(64);
  bool stopping = false;
  while (!stopping) {
    const int timeout = s.SweepDeadlines();
    s.graveyard.clear();
    const int n =
        ::epoll_wait(s.epoll_fd.get(), events.data(), static_cast<int>(events.size()), timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::epoll_ctl(s.epoll_fd.get(), EPOLL_CTL_DEL, stop_fd, nullptr);
      return std::unexpected(Errno("epoll_wait"));
    }
    for (int i = 0; i < n; ++i) {
      void* tag = events[i].data.ptr;
      if (tag == &s.stop_tag) {
        stopping = true;
      } else if (tag == &s.listen_tag) {
        s.Accept();
      } else {
        s.Handle(*static_cast<Side*>(tag), events[i].events);
      }
    }
  }
  ::epoll_ctl(s.epoll_fd.get(), EPOLL_CTL_DEL, stop_fd, nullptr);
  s.graveyard.clear();
  return {};
}

size_t TcpRelay::open_connections() const {
  return impl_->connections.size();
}
RelayCounters TcpRelay::counters() const {
  return impl_->counters;
}

}  // namespace deskbox::forward
