#pragma once
// Egress policy: what a sandbox may reach. A policy is a default (deny or allow) and two rule
// lists; a rule is a domain ("example.com"), a wildcard ("*.example.com": any name below it, not
// the apex), an address or CIDR (v4 or v6), each optionally limited to ports
// ("example.com:443", "10.1.0.0/16:80,8000-8100", "[2001:db8::/32]:443").
//
// How decisions are made (docs/egress.md):
// - A connection that names a host (TLS SNI, HTTP Host) is judged by that name: deny rules for
//   the name, then allow rules for the name, then the default. The name is resolved by deskboxd,
//   and the address it resolves to must also pass the deny CIDR rules and the address guard.
// - A connection that names no host (plain TCP, TLS without SNI, an IP literal) is judged by its
//   original destination: deny CIDR rules, then allow CIDR rules, then the default.
// - A DNS query may go upstream only for a name the name rules (or the default) allow.
// - The address guard (Reachability) refuses loopback, private, link-local, CGNAT, multicast,
//   reserved and cloud-metadata addresses whatever the policy says, unless the operator lists a
//   CIDR as reachable.
#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "egress/error.h"

namespace deskbox::egress {

struct Cidr {
  boost::asio::ip::address base;  // masked to the prefix
  unsigned prefix = 0;
  bool Contains(const boost::asio::ip::address& a) const;
  std::string ToString() const;
};
// "10.0.0.0/8", "10.1.2.3" (= /32), "2001:db8::/32", "::1" (= /128). Host bits must be zero.
std::expected<Cidr, Error> ParseCidr(std::string_view text);

// The IPv4 address a v6 address stands for: v4-mapped (::ffff:a.b.c.d) or under the NAT64
// well-known prefix (64:ff9b::a.b.c.d); nullopt for others.
std::optional<boost::asio::ip::address> EmbeddedV4(const boost::asio::ip::address_v6& v6);

struct PortRange {
  uint16_t first = 0, last = 0;
};

struct Rule {
  enum class Kind { kDomain, kWildcard, kCidr };
  Kind kind = Kind::kDomain;
  std::string domain;  // kDomain: the name; kWildcard: the suffix after "*."
  Cidr cidr;           // kCidr
  std::vector<PortRange> ports;  // empty: every port
  std::string text;    // canonical text, as returned by the API and named in audit events

  bool IsName() const { return kind != Kind::kCidr; }
  bool MatchesName(std::string_view name) const;  // name rules only
  bool MatchesAddress(const boost::asio::ip::address& a) const;  // CIDR rules only
  bool MatchesPort(uint16_t port) const;
  bool AllPorts() const { return ports.empty(); }
};
std::expected<Rule, Error> ParseRule(std::string_view text);

enum class DefaultAction { kDeny, kAllow };

inline constexpr size_t kMaxRules = 1000;  // per list

struct Policy {
  DefaultAction default_action = DefaultAction::kDeny;
  std::vector<Rule> allow;
  std::vector<Rule> deny;
};

// {"default": "deny"|"allow", "allow": [rule...], "deny": [rule...]}; every field optional
// ("default" falls back to `fallback`); unknown fields are refused. Errors (kBadPolicy, as are
// ParseRule's and ParseCidr's) name the field: "egress.allow[2]: ...".
std::expected<Policy, Error> ParsePolicy(const nlohmann::json& j, DefaultAction fallback);
nlohmann::json PolicyJson(const Policy& p);

struct Verdict {
  bool allowed = false;
  std::string rule;    // the rule's text, or "default"
  std::string reason;  // why it was denied ("" when allowed)
};

// May the guest resolve `name` (normalized, not an address literal)?
Verdict DecideName(const Policy& p, std::string_view name);
// A connection naming `name` on `port` (before resolution: deny and allow name rules, default).
Verdict DecideNamedConnection(const Policy& p, std::string_view name, uint16_t port);
// The address a named connection resolved to: only deny CIDR rules apply.
Verdict CheckResolvedAddress(const Policy& p, const boost::asio::ip::address& a, uint16_t port);
// A connection naming no host, to `a`:`port`.
Verdict DecideAddressConnection(const Policy& p, const boost::asio::ip::address& a, uint16_t port);

// The address guard.
class Reachability {
 public:
  explicit Reachability(std::vector<Cidr> operator_reachable = {});
  // Why `a` may not be dialed ("loopback", "private", "cloud metadata", ...), or nullopt.
  std::optional<std::string> Forbidden(const boost::asio::ip::address& a) const;
  const std::vector<Cidr>& operator_reachable() const { return reachable_; }

 private:
  std::vector<Cidr> reachable_;
};

}  // namespace deskbox::egress
