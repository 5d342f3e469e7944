#include "egress/egress.h"

#include <netinet/in.h>
#include <openssl/rand.h>
#include <sys/socket.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>

#include <set>

#include "common/log.h"
#include "common/slot_network.h"
#include "egress/nflog.h"
#include "egress/sniff.h"

namespace deskbox::egress {

namespace asio = boost::asio;
namespace ip = boost::asio::ip;
using asio::awaitable;
using asio::use_awaitable;
using namespace asio::experimental::awaitable_operators;
using Clock = std::chrono::steady_clock;
constexpr auto kTuple = asio::as_tuple(use_awaitable);

namespace {
constexpr char kLog[] = "egress";
// SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/
// ip6_tables.h): the destination a connection had before the slot's DNAT rule.
constexpr int kSoOriginalDst = 80;
constexpr size_t kCacheEntries = 4096;
constexpr size_t kUplinkBatch = 8;
constexpr size_t kMaxCandidates = 8;  // addresses of one name tried per connection

uint16_t RandomId() {
  uint16_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1) std::abort();  // no entropy: cannot go on safely
  return v;
}

std::expected<ip::tcp::endpoint, std::string> OriginalDestination(ip::tcp::socket& s, bool v6) {
  if (v6) {
    sockaddr_in6 a{};
    socklen_t len = sizeof a;
    if (::getsockopt(s.native_handle(), SOL_IPV6, kSoOriginalDst, &a, &len) != 0)
      return std::unexpected(fmt::format("original destination: {}", std::strerror(errno)));
    ip::address_v6::bytes_type b;
    std::memcpy(b.data(), &a.sin6_addr, 16);
    return ip::tcp::endpoint(ip::address_v6(b), ntohs(a.sin6_port));
  }
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockopt(s.native_handle(), SOL_IP, kSoOriginalDst, &a, &len) != 0)
    return std::unexpected(fmt::format("original destination: {}", std::strerror(errno)));
  return ip::tcp::endpoint(ip::address_v4(ntohl(a.sin_addr.s_addr)), ntohs(a.sin_port));
}

// Ends the guest's connection with a RST, so a refused connection fails at once and visibly.
void Reset(ip::tcp::socket& s) {
  boost::system::error_code ec;
  s.set_option(asio::socket_base::linger(true, 0), ec);
  s.close(ec);
}

bool InSandboxNetwork(const ip::address& a) {
  static const Cidr net4 = *ParseCidr(slot_network::kNet4), net6 = *ParseCidr(slot_network::kNet6);
  return net4.Contains(a) || net6.Contains(a);
}

const char* ProtocolName(SniffKind k) {
  switch (k) {
    case SniffKind::kTls: return "tls";
    case SniffKind::kHttp: return "http";
    default: return "tcp";
  }
}

uint32_t Millis(Clock::duration d) {
  return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}
}  // namespace

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

Egress::Egress(asio::any_io_executor executor, UplinkSockets& uplink, recorder::EventSink& events,
               EgressOptions options)
    : executor_(std::move(executor)), uplink_(uplink), events_(events), options_(std::move(options)) {}

Egress::~Egress() {
  *alive_ = false;
  for (auto& [id, sb] : sandboxes_) {
    sb->detached = true;
    sb->CloseAll("deskboxd is stopping");
  }
}

void Egress::Emit(const Sandbox& sb, recorder::v1::EgressDecision d) {
  recorder::Event e;
  e.set_sandbox_id(sb.id);
  e.mutable_actor()->set_kind(recorder::v1::Actor::SYSTEM);
  if (d.phase().empty()) d.set_phase("decision");
  *e.mutable_egress() = std::move(d);
  events_.Emit(std::move(e));
}

void Egress::Attach(const std::string& sandbox_id, SandboxSockets sockets, Policy policy) {
  Detach(sandbox_id);
  auto sb = std::make_shared<Sandbox>();
  sb->id = sandbox_id;
  sb->policy = std::make_shared<const Policy>(std::move(policy));
  sb->tokens = 2.0 * options_.dns_queries_per_second;
  if (sockets.tcp4) sb->tcp4 = std::make_unique<ip::tcp::acceptor>(executor_, ip::tcp::v4(), sockets.tcp4.release());
  if (sockets.tcp6) sb->tcp6 = std::make_unique<ip::tcp::acceptor>(executor_, ip::tcp::v6(), sockets.tcp6.release());
  if (sockets.udp4) sb->udp4 = std::make_unique<ip::udp::socket>(executor_, ip::udp::v4(), sockets.udp4.release());
  if (sockets.udp6) sb->udp6 = std::make_unique<ip::udp::socket>(executor_, ip::udp::v6(), sockets.udp6.release());
  if (sockets.nflog) sb->nflog = std::make_unique<asio::posix::stream_descriptor>(executor_, sockets.nflog.release());
  sandboxes_[sandbox_id] = sb;
  if (sb->tcp4) asio::co_spawn(executor_, AcceptLoop(sb, false), asio::detached);
  if (sb->tcp6) asio::co_spawn(executor_, AcceptLoop(sb, true), asio::detached);
  if (sb->udp4) asio::co_spawn(executor_, DnsLoop(sb, false), asio::detached);
  if (sb->udp6) asio::co_spawn(executor_, DnsLoop(sb, true), asio::detached);
  if (sb->nflog) asio::co_spawn(executor_, NflogLoop(sb), asio::detached);
}

bool Egress::SetPolicy(const std::string& sandbox_id, Policy policy) {
  auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return false;
  Sandbox& sb = *it->second;
  sb.policy = std::make_shared<const Policy>(std::move(policy));
  // Live connections are judged again: what the new policy refuses is cut now, not at its end.
  for (auto* c : std::vector<Connection*>(sb.connections.begin(), sb.connections.end())) {
    if (!c->upstream) continue;  // still deciding: the decision reads the new policy
    Verdict v = c->name.empty() ? DecideAddressConnection(*sb.policy, c->address, c->port)
                                : DecideNamedConnection(*sb.policy, c->name, c->port);
    if (v.allowed && !c->name.empty()) v = CheckResolvedAddress(*sb.policy, c->address, c->port);
    if (v.allowed) continue;
    c->closed_reason = fmt::format("policy changed: {}", v.reason);
    boost::system::error_code ec;
    c->guest->close(ec);
    c->upstream->close(ec);
  }
  return true;
}

void Egress::Detach(const std::string& sandbox_id) {
  auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return;
  it->second->detached = true;
  it->second->CloseAll("sandbox network detached");
  sandboxes_.erase(it);
}

bool Egress::Attached(const std::string& sandbox_id) const { return sandboxes_.count(sandbox_id) > 0; }

size_t Egress::OpenConnections() const {
  size_t n = 0;
  for (const auto& [id, sb] : sandboxes_) n += sb->connections.size();
  return n;
}

// ---------------------------------------------------------------------------------------------
// Uplink sockets and the resolver

awaitable<std::expected<UniqueFd, std::string>> Egress::TakeUplink(bool ipv6, bool udp) {
  auto key = std::make_pair(ipv6, udp);
  auto alive = alive_;
  auto& pool = uplink_pool_[key];
  // Refill in the background before the pool runs dry, one refill at a time per kind, so a
  // connection rarely waits for the jailer and bursts do not pile up idle sockets.
  if (pool.size() <= kUplinkBatch / 2 && !uplink_refilling_.count(key)) {
    uplink_refilling_.insert(key);
    asio::co_spawn(executor_, [this, key, alive]() -> awaitable<void> {
      auto fds = co_await uplink_.Open(key.first, key.second, kUplinkBatch);
      if (!*alive) co_return;
      uplink_refilling_.erase(key);
      if (!fds) co_return;  // the next TakeUplink asks again and reports the error
      auto& p = uplink_pool_[key];
      for (auto& f : *fds)
        if (p.size() < 2 * kUplinkBatch) p.push_back(std::move(f));
    }, asio::detached);
  }
  if (!pool.empty()) {
    UniqueFd fd = std::move(pool.back());
    pool.pop_back();
    co_return fd;
  }
  // Empty: this connection asks for its own one socket.
  auto fds = co_await uplink_.Open(ipv6, udp, 1);
  if (!*alive) co_return std::unexpected("stopping");
  if (!fds) co_return std::unexpected(fds.error());
  if (fds->empty()) co_return std::unexpected("no uplink socket");
  co_return std::move(fds->front());
}

awaitable<std::expected<dns::Response, std::string>> Egress::QueryUpstream(const std::string& name, uint16_t qtype,
                                                                           const ip::udp::endpoint& server) {
  auto fd = co_await TakeUplink(server.address().is_v6(), true);
  if (!fd) co_return std::unexpected(fd.error());
  ip::udp::socket sock(executor_, server.address().is_v6() ? ip::udp::v6() : ip::udp::v4(), fd->release());
  uint16_t id = RandomId();
  auto query = dns::BuildQuery(id, name, qtype);
  boost::system::error_code ec;
  sock.connect(server, ec);  // a fresh socket per query: a fresh random source port
  if (ec) co_return std::unexpected(fmt::format("resolver {}: {}", server.address().to_string(), ec.message()));
  // The deadline races each operation (awaitable ||): no completion handler outlives this frame.
  asio::steady_timer timer(executor_);
  timer.expires_after(options_.dns_timeout);
  auto alive = alive_;
  const std::string where = fmt::format("resolver {}", server.address().to_string());
  auto sent = co_await (sock.async_send(asio::buffer(query), kTuple) || timer.async_wait(kTuple));
  if (!*alive) co_return std::unexpected("stopping");
  if (sent.index() == 1) co_return std::unexpected(where + " did not take the query in time");
  if (auto [se, n] = std::get<0>(sent); se) co_return std::unexpected(fmt::format("{}: {}", where, se.message()));
  std::vector<uint8_t> buf(dns::kMaxUdpMessage);
  for (;;) {
    auto got = co_await (sock.async_receive(asio::buffer(buf), kTuple) || timer.async_wait(kTuple));
    if (!*alive) co_return std::unexpected("stopping");
    if (got.index() == 1)
      co_return std::unexpected(fmt::format("{} did not answer in {} ms", where, options_.dns_timeout.count()));
    auto [re, n] = std::get<0>(got);
    if (re) co_return std::unexpected(fmt::format("{}: {}", where, re.message()));
    auto r = dns::ParseResponse(std::span(buf.data(), n), id, name, qtype);
    if (r) co_return r;
    // Not the answer to this query (wrong id or question): keep waiting for the real one.
  }
}

awaitable<std::expected<dns::Response, std::string>> Egress::Resolve(std::string name, uint16_t qtype) {
  auto key = std::make_pair(name, qtype);
  auto now = Clock::now();
  if (auto it = cache_.find(key); it != cache_.end()) {
    if (it->second.expires > now) co_return it->second.response;
    cache_.erase(it);
  }
  if (options_.resolvers.empty()) co_return std::unexpected("no upstream resolver configured");
  std::string last;
  auto alive = alive_;
  for (const auto& server : options_.resolvers) {
    auto r = co_await QueryUpstream(name, qtype, server);
    if (!*alive) co_return std::unexpected("stopping");
    if (!r) {
      last = r.error();
      continue;
    }
    if (r->rcode != dns::kNoError && r->rcode != dns::kNxDomain) {
      last = fmt::format("resolver {} answered rcode {}", server.address().to_string(), r->rcode);
      continue;
    }
    uint32_t ttl = 300;
    for (const auto& rec : r->records) ttl = std::min(ttl, rec.ttl);
    if (r->records.empty()) ttl = 5;
    if (ttl > 0) {
      if (cache_.size() >= kCacheEntries) EvictOne();
      cache_[key] = {Clock::now() + std::chrono::seconds(ttl), *r};
    }
    co_return r;
  }
  ++counters_.dns_upstream_failures;
  co_return std::unexpected(last);
}

bool Egress::UplinkIsThisNetns(int uplink_fd) {
  if (!uplink_is_this_netns_) {
    // SO_NETNS_COOKIE (Linux 5.14) names a socket's netns; where it is missing, assume the worst.
    constexpr int kSoNetnsCookie = 71;
    uint64_t theirs = 0, ours = 0;
    socklen_t len = sizeof theirs;
    UniqueFd probe(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    bool known = probe && ::getsockopt(uplink_fd, SOL_SOCKET, kSoNetnsCookie, &theirs, &len) == 0 &&
                 (len = sizeof ours, ::getsockopt(probe.get(), SOL_SOCKET, kSoNetnsCookie, &ours, &len) == 0);
    uplink_is_this_netns_ = !known || theirs == ours;
  }
  return *uplink_is_this_netns_;
}

bool Egress::IsCached(const std::string& name, uint16_t qtype) const {
  auto it = cache_.find({name, qtype});
  return it != cache_.end() && it->second.expires > Clock::now();
}

void Egress::EvictOne() {
  // The entry that expires first (an expired one if any): one guest's lookups cannot flush
  // everything the others resolved.
  auto victim = cache_.begin();
  for (auto it = cache_.begin(); it != cache_.end(); ++it)
    if (it->second.expires < victim->second.expires) victim = it;
  if (victim != cache_.end()) cache_.erase(victim);
}

bool Egress::TakeDnsToken(Sandbox& sb) {
  auto now = Clock::now();
  double rate = options_.dns_queries_per_second;
  sb.tokens = std::min(2 * rate, sb.tokens + rate * std::chrono::duration<double>(now - sb.refilled).count());
  sb.refilled = now;
  if (sb.tokens < 1) return false;
  sb.tokens -= 1;
  return true;
}

// ---------------------------------------------------------------------------------------------
// DNS responder

awaitable<void> Egress::DnsLoop(std::shared_ptr<Sandbox> sb, bool v6) {
  ip::udp::socket& sock = v6 ? *sb->udp6 : *sb->udp4;
  std::vector<uint8_t> buf(dns::kMaxUdpMessage);
  for (;;) {
    ip::udp::endpoint from;
    auto [ec, n] = co_await sock.async_receive_from(asio::buffer(buf), from, kTuple);
    if (sb->detached || ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
    if (ec) continue;  // e.g. ICMP errors from earlier answers
    auto now = Clock::now();
    if (sb->dns_in_flight >= options_.max_dns_in_flight_per_sandbox || !TakeDnsToken(*sb)) {
      ++counters_.dns_rate_limited;
      ++sb->limited_since_report;
      // One event a second at most says how many were dropped: the log must not flood either.
      if (now - sb->last_limit_report >= std::chrono::seconds(1)) {
        recorder::v1::EgressDecision d;
        d.set_protocol("dns");
        d.set_allowed(false);
        d.set_rule("rate limit");
        d.set_reason(fmt::format("{} queries dropped: over {} queries a second", sb->limited_since_report,
                                 options_.dns_queries_per_second));
        Emit(*sb, std::move(d));
        sb->limited_since_report = 0;
        sb->last_limit_report = now;
      }
      continue;
    }
    ++sb->dns_in_flight;
    asio::co_spawn(executor_, AnswerQuery(sb, v6, std::vector<uint8_t>(buf.begin(), buf.begin() + n), from),
                   asio::detached);
  }
}

awaitable<void> Egress::AnswerQuery(std::shared_ptr<Sandbox> sb, bool v6, std::vector<uint8_t> message,
                                    ip::udp::endpoint from) {
  struct InFlight {
    Sandbox& sb;
    ~InFlight() { --sb.dns_in_flight; }
  } in_flight{*sb};
  auto alive = alive_;
  recorder::v1::EgressDecision d;
  d.set_protocol("dns");
  d.set_port(53);
  std::vector<uint8_t> answer;
  auto q = dns::ParseQuery(message);
  if (!q) {
    auto id = dns::HeaderId(message);
    if (!id) co_return;  // not even a header: nothing to answer
    answer = dns::BuildHeaderOnly(*id, dns::kFormErr);
    d.set_allowed(false);
    d.set_reason(fmt::format("malformed query: {}", q.error()));
    ++counters_.dns_denied;
  } else {
    d.set_name(q->name);
    d.set_query_type(dns::TypeName(q->qtype));
    auto refuse = [&](std::string rule, std::string why) {
      answer = dns::BuildAnswer(*q, dns::kRefused, {});
      d.set_allowed(false);
      d.set_rule(std::move(rule));
      d.set_reason(std::move(why));
      ++counters_.dns_denied;
    };
    std::shared_ptr<const Policy> policy = sb->policy;
    if (q->qclass != dns::kClassIn) {
      refuse("", "only class IN is answered");
    } else if (q->qtype != dns::kTypeA && q->qtype != dns::kTypeAaaa) {
      refuse("", "only A and AAAA queries are answered");
    } else if (q->name.empty() || IsAddressLiteral(q->name)) {
      refuse("", "not a host name");
    } else if (Verdict v = DecideName(*policy, q->name); !v.allowed) {
      refuse(v.rule, v.reason);
    } else {
      d.set_rule(v.rule);
      auto r = co_await Resolve(q->name, q->qtype);
      if (!*alive || sb->detached) co_return;
      policy = sb->policy;  // it may have changed while resolving
      if (Verdict again = DecideName(*policy, q->name); !again.allowed) {
        refuse(again.rule, "policy changed: " + again.reason);
      } else if (!r) {
        answer = dns::BuildAnswer(*q, dns::kServFail, {});
        d.set_allowed(true);
        d.set_reason(fmt::format("upstream: {}", r.error()));
      } else {
        std::vector<dns::Record> kept;
        std::string removed;
        for (auto rec : r->records) {
          std::optional<std::string> why = AddressRefusal(*policy, rec.address, 0);
          if (why) {
            if (removed.empty()) removed = fmt::format("{} ({})", rec.address.to_string(), *why);
            continue;
          }
          rec.ttl = std::min(rec.ttl, options_.answer_ttl_max_s);
          kept.push_back(rec);
        }
        answer = dns::BuildAnswer(*q, r->rcode, kept);
        if (!kept.empty()) d.set_address(kept.front().address.to_string());
        if (!removed.empty() && kept.empty()) {
          // Rebinding: an allowed name whose answer points inside. The guest learns nothing.
          d.set_allowed(false);
          d.set_reason(fmt::format("answer removed: {}", removed));
          ++counters_.dns_denied;
        } else {
          d.set_allowed(true);
          if (r->rcode == dns::kNxDomain) d.set_reason("no such name");
          else if (!removed.empty()) d.set_reason(fmt::format("answer partly removed: {}", removed));
          ++counters_.dns_allowed;
        }
      }
    }
  }
  Emit(*sb, std::move(d));
  if (sb->detached) co_return;
  ip::udp::socket& sock = v6 ? *sb->udp6 : *sb->udp4;
  co_await sock.async_send_to(asio::buffer(answer), from, kTuple);
}

// ---------------------------------------------------------------------------------------------
// Refused packets

awaitable<void> Egress::NflogLoop(std::shared_ptr<Sandbox> sb) {
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    auto [ec] = co_await sb->nflog->async_wait(asio::posix::descriptor_base::wait_read, kTuple);
    if (sb->detached || ec) co_return;
    for (;;) {
      ssize_t n = ::recv(sb->nflog->native_handle(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (n < 0) {
        if (errno == ENOBUFS) {  // the kernel dropped log messages: say so once
          log::Warn(kLog, "sandbox {}: refused-packet log overflowed", sb->id);
          continue;
        }
        break;
      }
      for (auto& p : nflog::ParsePackets(std::span(buf.data(), static_cast<size_t>(n)))) {
        ++counters_.packets_refused;
        recorder::v1::EgressDecision d;
        d.set_protocol(p.protocol);
        d.set_address(p.destination);
        d.set_port(p.port);
        d.set_allowed(false);
        d.set_rule("firewall");
        d.set_reason(p.protocol == "udp" && p.port == 443
                         ? "QUIC and other UDP do not leave the sandbox (only TCP through the proxy, and DNS)"
                         : "only TCP (through the proxy) and DNS leave the sandbox");
        Emit(*sb, std::move(d));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// TCP proxy

awaitable<void> Egress::AcceptLoop(std::shared_ptr<Sandbox> sb, bool v6) {
  ip::tcp::acceptor& acceptor = v6 ? *sb->tcp6 : *sb->tcp4;
  for (;;) {
    auto [ec, sock] = co_await acceptor.async_accept(kTuple);
    if (sb->detached || ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) co_return;
    if (ec) {
      // EMFILE and friends: wait a little rather than spin.
      asio::steady_timer t(executor_);
      t.expires_after(std::chrono::milliseconds(50));
      co_await t.async_wait(kTuple);
      continue;
    }
    asio::co_spawn(executor_, Proxy(sb, std::move(sock)), asio::detached);
  }
}

namespace {
// Copies one direction until EOF or error; half-closes the other side at EOF.
awaitable<void> Pump(ip::tcp::socket& from, ip::tcp::socket& to, uint64_t& bytes, Clock::time_point& last) {
  std::vector<uint8_t> buf(64 * 1024);
  for (;;) {
    auto [ec, n] = co_await from.async_read_some(asio::buffer(buf), kTuple);
    if (ec) {
      boost::system::error_code ignored;
      if (ec == asio::error::eof) to.shutdown(ip::tcp::socket::shutdown_send, ignored);
      else {
        from.close(ignored);
        to.close(ignored);
      }
      co_return;
    }
    auto [we, m] = co_await asio::async_write(to, asio::buffer(buf.data(), n), kTuple);
    if (we) {
      boost::system::error_code ignored;
      from.close(ignored);
      to.close(ignored);
      co_return;
    }
    bytes += n;
    last = Clock::now();
  }
}

awaitable<void> IdleWatch(ip::tcp::socket& a, ip::tcp::socket& b, const Clock::time_point& last,
                          std::chrono::seconds idle, bool& expired) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  for (;;) {
    t.expires_at(last + idle);
    auto [ec] = co_await t.async_wait(kTuple);
    if (ec) co_return;  // cancelled: the pumps ended
    if (Clock::now() - last >= idle) {
      expired = true;
      boost::system::error_code ignored;
      a.close(ignored);
      b.close(ignored);
      co_return;
    }
  }
}
}  // namespace

std::optional<std::string> Egress::AddressRefusal(const Policy& p, const ip::address& a, uint16_t port) const {
  if (InSandboxNetwork(a)) return std::string("the sandbox network's own address");
  if (auto why = options_.reachability.Forbidden(a)) return *why;
  if (Verdict c = CheckResolvedAddress(p, a, port); !c.allowed) return c.reason + " " + c.rule;
  return std::nullopt;
}

awaitable<void> Egress::Proxy(std::shared_ptr<Sandbox> sb, ip::tcp::socket guest) {
  auto alive = alive_;
  const auto t0 = Clock::now();
  bool v6 = guest.local_endpoint().address().is_v6();
  Connection conn;
  conn.guest = &guest;
  struct Registered {
    Egress& egress;
    Sandbox& sb;
    Connection* c;
    ~Registered() {
      sb.connections.erase(c);
      --egress.total_connections_;
    }
  } registered{*this, *sb, &conn};
  sb->connections.insert(&conn);
  ++total_connections_;

  recorder::v1::EgressDecision d;
  d.set_protocol("tcp");
  auto deny = [&](std::string rule, std::string reason) {
    d.set_allowed(false);
    d.set_rule(std::move(rule));
    d.set_reason(std::move(reason));
    ++counters_.connections_denied;
    Emit(*sb, d);
    Reset(guest);
  };

  auto dst = OriginalDestination(guest, v6);
  if (!dst) {
    deny("", dst.error());
    co_return;
  }
  d.set_address(dst->address().to_string());
  d.set_port(dst->port());
  if (sb->connections.size() > options_.max_connections_per_sandbox) {
    deny("limit", fmt::format("more than {} connections open", options_.max_connections_per_sandbox));
    co_return;
  }
  if (total_connections_ > options_.max_connections_total) {
    deny("limit", fmt::format("deskboxd has {} egress connections open", options_.max_connections_total));
    co_return;
  }
  if (InSandboxNetwork(dst->address())) {
    deny("", "the sandbox network's own addresses are not reachable");
    co_return;
  }

  // What is the client about? Wait for its first bytes, bounded in size and time. The deadline
  // races each read (awaitable ||), so nothing outlives this frame.
  std::vector<uint8_t> head;
  head.reserve(4096);
  SniffResult sniff;
  {
    asio::steady_timer deadline(executor_);
    deadline.expires_after(options_.sniff_timeout);
    std::array<uint8_t, 4096> chunk;
    for (;;) {
      sniff = Sniff(head);
      if (sniff.kind != SniffKind::kNeedMore) break;
      if (head.size() >= kMaxSniffBytes) {
        sniff = {SniffKind::kMalformed, "", fmt::format("no decision after {} bytes", head.size())};
        break;
      }
      size_t want = std::min(chunk.size(), kMaxSniffBytes - head.size());
      auto got = co_await (guest.async_read_some(asio::buffer(chunk.data(), want), kTuple) ||
                           deadline.async_wait(kTuple));
      if (!*alive || sb->detached) co_return;
      if (got.index() == 1) {
        if (head.empty()) sniff = {SniffKind::kOther, "", ""};  // the server is to speak first
        else sniff = {SniffKind::kMalformed, "", fmt::format("incomplete request after {} ms", options_.sniff_timeout.count())};
        break;
      }
      auto [ec, n] = std::get<0>(got);
      if (ec) co_return;  // the guest gave up (or deskboxd closed it): nothing was asked
      head.insert(head.end(), chunk.begin(), chunk.begin() + n);
    }
  }
  d.set_protocol(ProtocolName(sniff.kind));
  if (sniff.kind == SniffKind::kMalformed) {
    deny("", sniff.detail.empty() ? "malformed request" : sniff.detail);
    co_return;
  }
  std::string name = sniff.name;
  d.set_name(name);
  if (IsAddressLiteral(name)) name.clear();  // a literal names no host: judged by the destination
  conn.name = name;
  conn.port = dst->port();

  // The verdict for this connection under policy `p`, before knowing the address dialed.
  auto decide = [&](const Policy& p) {
    return name.empty() ? DecideAddressConnection(p, dst->address(), dst->port())
                        : DecideNamedConnection(p, name, dst->port());
  };

  // The addresses to try, each already checked.
  std::vector<ip::address> candidates;
  std::string rule;
  if (!name.empty()) {
    Verdict v = decide(*sb->policy);
    if (!v.allowed) {
      d.set_address("");
      deny(v.rule, v.reason);
      co_return;
    }
    rule = v.rule;
    // The guest's idea of the address is not trusted: resolve the name here, the destination's
    // family first. Lookups that miss the cache count against the sandbox's DNS rate.
    std::vector<ip::address> resolved;
    std::string resolve_error;
    uint16_t order[2] = {dns::kTypeA, dns::kTypeAaaa};
    if (v6) std::swap(order[0], order[1]);
    for (uint16_t qtype : order) {
      if (!IsCached(name, qtype) && !TakeDnsToken(*sb)) {
        ++counters_.dns_rate_limited;
        deny("rate limit", fmt::format("over {} DNS queries a second", options_.dns_queries_per_second));
        co_return;
      }
      auto r = co_await Resolve(name, qtype);
      if (!*alive || sb->detached) co_return;
      if (!r) resolve_error = r.error();
      else
        for (const auto& rec : r->records) resolved.push_back(rec.address);
    }
    std::string first_refusal;
    for (const auto& a : resolved) {
      if (auto why = AddressRefusal(*sb->policy, a, dst->port())) {
        if (first_refusal.empty()) first_refusal = fmt::format("{} resolves to {} ({})", name, a.to_string(), *why);
        continue;
      }
      if (candidates.size() < kMaxCandidates) candidates.push_back(a);
    }
    if (candidates.empty()) {
      d.set_address(resolved.empty() ? "" : resolved.front().to_string());
      deny(rule, !first_refusal.empty() ? first_refusal
                 : !resolve_error.empty() ? fmt::format("{} did not resolve: {}", name, resolve_error)
                                          : fmt::format("{} has no address", name));
      co_return;
    }
  } else {
    if (auto why = options_.reachability.Forbidden(dst->address())) {
      deny("", fmt::format("{} address", *why));
      co_return;
    }
    Verdict v = decide(*sb->policy);
    if (!v.allowed) {
      deny(v.rule, v.reason);
      co_return;
    }
    rule = v.rule;
    candidates.push_back(dst->address());
  }
  d.set_rule(rule);

  // Dial from the uplink netns, candidates in order, all within one connect timeout.
  std::optional<ip::tcp::socket> upstream;
  std::string dial_error;
  asio::steady_timer deadline(executor_);
  deadline.expires_after(options_.connect_timeout);
  for (const auto& a : candidates) {
    auto fd = co_await TakeUplink(a.is_v6(), false);
    if (!*alive || sb->detached) co_return;
    if (!fd) {
      dial_error = fd.error();
      break;
    }
    ip::tcp::socket s(executor_, a.is_v6() ? ip::tcp::v6() : ip::tcp::v4(), fd->release());
    auto got = co_await (s.async_connect({a, dst->port()}, kTuple) || deadline.async_wait(kTuple));
    if (!*alive || sb->detached) co_return;
    if (got.index() == 1) {
      dial_error = fmt::format("connect {}: timed out", a.to_string());
      break;
    }
    if (auto [ec] = std::get<0>(got); ec) {
      dial_error = fmt::format("connect {}: {}", a.to_string(), ec.message());
      continue;
    }
    // With the host's own netns as the uplink (the default), the host's addresses are not a way
    // in: a connection that landed on one (its source is its destination) is refused. A
    // dedicated uplink netns is the operator's choice of what is there.
    boost::system::error_code lec;
    if (UplinkIsThisNetns(s.native_handle()) && s.local_endpoint(lec).address() == a) {
      d.set_address(a.to_string());
      deny("", "an address of the uplink network itself");
      co_return;
    }
    d.set_address(a.to_string());
    conn.address = a;
    upstream.emplace(std::move(s));
    break;
  }
  if (!upstream) {
    // Allowed, but the other end could not be reached: say so, and refuse the guest.
    d.set_address(candidates.front().to_string());
    d.set_allowed(true);
    d.set_reason(dial_error);
    ++counters_.connections_allowed;
    Emit(*sb, d);
    Reset(guest);
    co_return;
  }
  // The policy may have changed while resolving or dialing: judge again with the current one.
  if (Verdict v = decide(*sb->policy); !v.allowed) {
    boost::system::error_code ignored;
    upstream->close(ignored);
    deny(v.rule, "policy changed: " + v.reason);
    co_return;
  }
  if (!name.empty()) {
    if (auto why = AddressRefusal(*sb->policy, conn.address, dst->port())) {
      boost::system::error_code ignored;
      upstream->close(ignored);
      deny(rule, "policy changed: " + *why);
      co_return;
    }
  }
  boost::system::error_code ignored;
  upstream->set_option(ip::tcp::no_delay(true), ignored);
  guest.set_option(ip::tcp::no_delay(true), ignored);
  conn.upstream = &*upstream;
  d.set_allowed(true);
  ++counters_.connections_allowed;
  Emit(*sb, d);

  uint64_t up = 0, down = 0;
  Clock::time_point last = Clock::now();
  bool idle = false;
  auto [we, wn] = co_await asio::async_write(*upstream, asio::buffer(head), kTuple);
  if (!we) {
    up += head.size();
    co_await ((Pump(guest, *upstream, up, last) && Pump(*upstream, guest, down, last)) ||
              IdleWatch(guest, *upstream, last, options_.idle_timeout, idle));
  }
  if (!*alive) co_return;
  counters_.bytes_up += up;
  counters_.bytes_down += down;
  upstream->close(ignored);
  guest.close(ignored);
  d.set_phase("closed");
  d.set_bytes_up(up);
  d.set_bytes_down(down);
  d.set_duration_ms(Millis(Clock::now() - t0));
  d.set_reason(idle ? fmt::format("idle for {} s", options_.idle_timeout.count()) : conn.closed_reason);
  Emit(*sb, std::move(d));
}

}  // namespace deskbox::egress
