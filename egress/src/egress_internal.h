#pragma once
// What egress.cc (policy, sandboxes, the TCP proxy, the audit) and egress_dns.cc (the DNS
// responder, the upstream resolver and the uplink sockets) share: the per-sandbox state behind
// Egress, and the constants both use.
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "egress/egress.h"

namespace deskbox::egress::internal {

namespace asio = boost::asio;
namespace ip = boost::asio::ip;
using Clock = std::chrono::steady_clock;
inline constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

// A random 16-bit id (DNS query ids); aborts without entropy, which nothing can go on without.
uint16_t RandomId();

}  // namespace deskbox::egress::internal

namespace deskbox::egress {

// The names egress.cc and egress_dns.cc write in.
namespace asio = boost::asio;
namespace ip = boost::asio::ip;
using asio::awaitable;
using asio::use_awaitable;
using namespace asio::experimental::awaitable_operators;
using internal::Clock;
using internal::kTuple;

struct Egress::Connection {
  ip::tcp::socket* guest = nullptr;
  ip::tcp::socket* upstream = nullptr;  // null until dialed
  std::string name;                     // "" when judged by address
  ip::address address;
  uint16_t port = 0;
  std::string closed_reason;            // set when deskboxd ends it (policy change, detach)
};

struct Egress::Sandbox {
  std::string id;
  std::shared_ptr<const Policy> policy;
  std::unique_ptr<ip::tcp::acceptor> tcp4, tcp6;
  std::unique_ptr<ip::udp::socket> udp4, udp6;
  std::unique_ptr<asio::posix::stream_descriptor> nflog;
  std::set<Connection*> connections;
  bool detached = false;
  // DNS rate limit: a token bucket refilled continuously.
  double tokens = 0;
  Clock::time_point refilled = Clock::now();
  uint64_t limited_since_report = 0;
  Clock::time_point last_limit_report{};
  size_t dns_in_flight = 0;

  void CloseAll(const std::string& why) {
    boost::system::error_code ec;
    for (auto* a : {tcp4.get(), tcp6.get()})
      if (a) a->close(ec);
    for (auto* u : {udp4.get(), udp6.get()})
      if (u) u->close(ec);
    if (nflog) nflog->close(ec);
    for (auto* c : connections) {
      c->closed_reason = why;
      if (c->guest) c->guest->close(ec);
      if (c->upstream) c->upstream->close(ec);
    }
  }
};

}  // namespace deskbox::egress
