#pragma once
// Egress: each attached sandbox's DNS responder and TCP proxy, serving the sockets the jailer
// bound inside the sandbox's netns (see common/slot_network.h), and the audit of every decision.
//
// - TCP: the slot's nftables send every guest TCP connection here. The proxy reads the original
//   destination (SO_ORIGINAL_DST), sniffs the TLS SNI or HTTP Host (sniff.h), decides with the
//   sandbox's policy (policy.h), resolves names itself through the upstream resolver, refuses
//   forbidden addresses (Reachability), dials from the uplink netns and splices both ways.
// - DNS: UDP 53 from the guest comes here. A and AAAA for names the policy allows are answered
//   from the upstream resolver (forbidden addresses removed from answers); everything else is
//   REFUSED. Rate limited per sandbox.
// - Refused packets (UDP, QUIC, ICMP, ...) are read from the slot's NFLOG socket.
// Every decision is an EgressDecision event on the sandbox's log and counted.
//
// Threads: one io_context thread (deskboxd's). A policy change applies to the next query or
// connection at once, and live connections the new policy refuses are closed.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "egress/dns_message.h"
#include "egress/error.h"
#include "egress/policy.h"
#include "recorder/event_sink.h"

namespace deskbox::egress {

struct EgressOptions {
  Reachability reachability;
  // Upstream resolvers, tried in order; deskboxd dials them from the uplink netns.
  std::vector<boost::asio::ip::udp::endpoint> resolvers;
  // How long the proxy waits for the guest's first bytes. A client that sends nothing (a protocol
  // where the server speaks first) is then judged as plain TCP by its destination.
  std::chrono::milliseconds sniff_timeout{3000};
  std::chrono::milliseconds connect_timeout{10000};
  std::chrono::milliseconds dns_timeout{2000};
  std::chrono::seconds idle_timeout{900};
  uint32_t dns_queries_per_second = 100;  // per sandbox, with a burst of twice that
  uint32_t answer_ttl_max_s = 30;         // what the guest is told (policy changes must bite soon)
  size_t max_connections_per_sandbox = 256;
  size_t max_connections_total = 4096;  // all sandboxes: two descriptors each
  size_t max_dns_in_flight_per_sandbox = 64;
};

// Sockets outside: unconnected TCP or UDP sockets in the uplink netns (from the jailer).
class UplinkSockets {
 public:
  virtual ~UplinkSockets() = default;
  // `count` sockets, or why there are none (kIo, or kTimeout when the jailer did not answer).
  virtual boost::asio::awaitable<std::expected<std::vector<UniqueFd>, Error>> Open(
      bool ipv6, bool udp, unsigned count) = 0;
};

// The sandbox side, bound by the jailer inside the sandbox's netns.
struct SandboxSockets {
  UniqueFd tcp4, tcp6;  // listening, slot_network::kEgressProxyPort
  UniqueFd udp4, udp6;  // bound, slot_network::kEgressDnsPort
  UniqueFd nflog;       // receiving the ruleset's log group; may be empty
};

struct EgressCounters {
  uint64_t dns_allowed = 0, dns_denied = 0, dns_rate_limited = 0, dns_upstream_failures = 0;
  uint64_t connections_allowed = 0, connections_denied = 0;
  uint64_t bytes_up = 0, bytes_down = 0;
  uint64_t packets_refused = 0;
};

class Egress {
 public:
  Egress(boost::asio::any_io_executor executor, UplinkSockets& uplink, recorder::EventSink& events,
         EgressOptions options);
  ~Egress();
  Egress(const Egress&) = delete;
  Egress& operator=(const Egress&) = delete;

  // Starts serving the sandbox's sockets under `policy` (replacing an earlier attachment).
  void Attach(const std::string& sandbox_id, SandboxSockets sockets, Policy policy);
  // Replaces the policy; closes live connections the new one refuses. False if not attached.
  bool SetPolicy(const std::string& sandbox_id, Policy policy);
  // Stops serving: closes the sockets and every live connection of the sandbox.
  void Detach(const std::string& sandbox_id);
  bool Attached(const std::string& sandbox_id) const;
  size_t OpenConnections() const;
  const EgressCounters& counters() const { return counters_; }
  const EgressOptions& options() const { return options_; }

  // The upstream resolver, cached (TTL, at most 5 minutes; NXDOMAIN 5 s; at most 4096 entries).
  // When every resolver fails, the error is the last one's: kRefused, kUpstream, kTimeout, kIo;
  // kUpstream when none is configured, kStopping when the Egress is destroyed meanwhile.
  boost::asio::awaitable<std::expected<dns::Response, Error>> Resolve(std::string name,
                                                                      uint16_t qtype);

  struct Sandbox;
  struct Connection;

 private:
  boost::asio::awaitable<std::expected<UniqueFd, Error>> TakeUplink(bool ipv6, bool udp);
  boost::asio::awaitable<std::expected<dns::Response, Error>> QueryUpstream(
      const std::string& name, uint16_t qtype, const boost::asio::ip::udp::endpoint& server);
  boost::asio::awaitable<void> AcceptLoop(std::shared_ptr<Sandbox> sb, bool v6);
  boost::asio::awaitable<void> DnsLoop(std::shared_ptr<Sandbox> sb, bool v6);
  boost::asio::awaitable<void> NflogLoop(std::shared_ptr<Sandbox> sb);
  boost::asio::awaitable<void> Proxy(std::shared_ptr<Sandbox> sb, boost::asio::ip::tcp::socket guest);
  boost::asio::awaitable<void> AnswerQuery(std::shared_ptr<Sandbox> sb, bool v6, std::vector<uint8_t> query,
                                           boost::asio::ip::udp::endpoint from);
  void Emit(const Sandbox& sb, recorder::v1::EgressDecision d);
  void EvictOne();
  bool IsCached(const std::string& name, uint16_t qtype) const;
  bool UplinkIsThisNetns(int uplink_fd);
  bool TakeDnsToken(Sandbox& sb);
  // Why the proxy may not dial `a` (sandbox network, address guard, deny rules), or nullopt.
  std::optional<std::string> AddressRefusal(const Policy& p, const boost::asio::ip::address& a, uint16_t port) const;

  boost::asio::any_io_executor executor_;
  UplinkSockets& uplink_;
  recorder::EventSink& events_;
  EgressOptions options_;
  EgressCounters counters_;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  struct CacheEntry {
    std::chrono::steady_clock::time_point expires;
    dns::Response response;
  };
  std::map<std::pair<std::string, uint16_t>, CacheEntry> cache_;
  std::map<std::pair<bool, bool>, std::vector<UniqueFd>> uplink_pool_;  // (ipv6, udp) → sockets
  std::set<std::pair<bool, bool>> uplink_refilling_;
  size_t total_connections_ = 0;
  std::optional<bool> uplink_is_this_netns_;  // learned from the first uplink socket
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deskbox::egress
