// The DNS side of Egress: the responder inside each sandbox's netns, the upstream resolver with
// its cache, and the pool of uplink sockets it asks through.
#include "egress/egress.h"

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

#include "egress/sniff.h"
#include "egress_internal.h"

namespace deskbox::egress {

using internal::RandomId;

namespace {
constexpr size_t kCacheEntries = 4096;
constexpr size_t kUplinkBatch = 8;

Error Stopping() {
  return {ErrorCode::kStopping, "stopping"};
}

// A failed socket operation with the resolver: kRefused when its port is closed (the ICMP
// port unreachable a connected UDP socket reports), else kIo.
Error SocketError(const boost::system::error_code& ec, std::string message) {
  return {ec == asio::error::connection_refused ? ErrorCode::kRefused : ErrorCode::kIo,
          std::move(message)};
}
}  // namespace

awaitable<std::expected<UniqueFd, Error>> Egress::TakeUplink(bool ipv6, bool udp) {
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
  if (!*alive) co_return std::unexpected(Stopping());
  if (!fds) co_return std::unexpected(std::move(fds.error()));
  if (fds->empty()) co_return std::unexpected(Error{ErrorCode::kIo, "no uplink socket"});
  co_return std::move(fds->front());
}

awaitable<std::expected<dns::Response, Error>> Egress::QueryUpstream(
    const std::string& name, uint16_t qtype, const ip::udp::endpoint& server) {
  auto fd = co_await TakeUplink(server.address().is_v6(), true);
  if (!fd) co_return std::unexpected(std::move(fd.error()));
  ip::udp::socket sock(executor_, server.address().is_v6() ? ip::udp::v6() : ip::udp::v4(), fd->release());
  uint16_t id = RandomId();
  auto query = dns::BuildQuery(id, name, qtype);
  boost::system::error_code ec;
  sock.connect(server, ec);  // a fresh socket per query: a fresh random source port
  if (ec)
    co_return std::unexpected(SocketError(
        ec, fmt::format("resolver {}: {}", server.address().to_string(), ec.message())));
  // The deadline races each operation (awaitable ||): no completion handler outlives this frame.
  asio::steady_timer timer(executor_);
  timer.expires_after(options_.dns_timeout);
  auto alive = alive_;
  const std::string where = fmt::format("resolver {}", server.address().to_string());
  auto sent = co_await (sock.async_send(asio::buffer(query), kTuple) || timer.async_wait(kTuple));
  if (!*alive) co_return std::unexpected(Stopping());
  if (sent.index() == 1)
    co_return std::unexpected(
        Error{ErrorCode::kTimeout, where + " did not take the query in time"});
  if (auto [se, n] = std::get<0>(sent); se)
    co_return std::unexpected(SocketError(se, fmt::format("{}: {}", where, se.message())));
  std::vector<uint8_t> buf(dns::kMaxUdpMessage);
  for (;;) {
    auto got = co_await (sock.async_receive(asio::buffer(buf), kTuple) || timer.async_wait(kTuple));
    if (!*alive) co_return std::unexpected(Stopping());
    if (got.index() == 1)
      co_return std::unexpected(
          Error{ErrorCode::kTimeout,
                fmt::format("{} did not answer in {} ms", where, options_.dns_timeout.count())});
    auto [re, n] = std::get<0>(got);
    if (re) co_return std::unexpected(SocketError(re, fmt::format("{}: {}", where, re.message())));
    auto r = dns::ParseResponse(std::span(buf.data(), n), id, name, qtype);
    if (r) co_return r;
    // Not the answer to this query (wrong id or question): keep waiting for the real one.
  }
}

awaitable<std::expected<dns::Response, Error>> Egress::Resolve(std::string name, uint16_t qtype) {
  auto key = std::make_pair(name, qtype);
  auto now = Clock::now();
  if (auto it = cache_.find(key); it != cache_.end()) {
    if (it->second.expires > now) co_return it->second.response;
    cache_.erase(it);
  }
  if (options_.resolvers.empty())
    co_return std::unexpected(Error{ErrorCode::kUpstream, "no upstream resolver configured"});
  Error last{ErrorCode::kUpstream, ""};
  auto alive = alive_;
  for (const auto& server : options_.resolvers) {
    auto r = co_await QueryUpstream(name, qtype, server);
    if (!*alive) co_return std::unexpected(Stopping());
    if (!r) {
      last = std::move(r.error());
      continue;
    }
    if (r->rcode != dns::kNoError && r->rcode != dns::kNxDomain) {
      last = {r->rcode == dns::kRefused ? ErrorCode::kRefused : ErrorCode::kUpstream,
              fmt::format("resolver {} answered rcode {}", server.address().to_string(), r->rcode)};
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
  co_return std::unexpected(std::move(last));
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
    d.set_reason(fmt::format("malformed query: {}", q.error().message));
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
        d.set_reason(fmt::format("upstream: {}", r.error().message));
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

}  // namespace deskbox::egress
