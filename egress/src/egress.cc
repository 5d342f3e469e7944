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
#include "egress_internal.h"

namespace deskbox::egress {


namespace {
constexpr char kLog[] = "egress";
// SO_ORIGINAL_DST (linux/netfilter_ipv4.h) and IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/
// ip6_tables.h): the destination a connection had before the slot's DNAT rule.
constexpr int kSoOriginalDst = 80;
constexpr size_t kMaxCandidates = 8;  // addresses of one name tried per connection

std::expected<ip::tcp::endpoint, Error> OriginalDestination(ip::tcp::socket& s, bool v6) {
  if (v6) {
    sockaddr_in6 a{};
    socklen_t len = sizeof a;
    if (::getsockopt(s.native_handle(), SOL_IPV6, kSoOriginalDst, &a, &len) != 0)
      return std::unexpected(
          Error{ErrorCode::kIo, fmt::format("original destination: {}", std::strerror(errno))});
    ip::address_v6::bytes_type b;
    std::memcpy(b.data(), &a.sin6_addr, 16);
    return ip::tcp::endpoint(ip::address_v6(b), ntohs(a.sin6_port));
  }
  sockaddr_in a{};
  socklen_t len = sizeof a;
  if (::getsockopt(s.native_handle(), SOL_IP, kSoOriginalDst, &a, &len) != 0)
    return std::unexpected(
        Error{ErrorCode::kIo, fmt::format("original destination: {}", std::strerror(errno))});
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

uint16_t internal::RandomId() {
  uint16_t v = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof v) != 1) std::abort();
  return v;
}

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
    deny("", dst.error().message);
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
      if (!r)
        resolve_error = r.error().message;
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
      dial_error = fd.error().message;
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
