#include "egress/policy.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "egress/sniff.h"

namespace deskbox::egress {

namespace ip = boost::asio::ip;
using nlohmann::json;

namespace {

// The address as 16 bytes (v4 as its v4-mapped form) and the prefix length in that space.
std::array<uint8_t, 16> Bytes16(const ip::address& a) {
  if (a.is_v6()) return a.to_v6().to_bytes();
  return ip::make_address_v6(ip::v4_mapped, a.to_v4()).to_bytes();
}

bool PrefixEqual(const std::array<uint8_t, 16>& x, const std::array<uint8_t, 16>& y, unsigned bits) {
  for (unsigned i = 0; i < 16 && bits > 0; ++i) {
    unsigned take = std::min(bits, 8u);
    uint8_t mask = static_cast<uint8_t>(0xff00 >> take);
    if ((x[i] & mask) != (y[i] & mask)) return false;
    bits -= take;
  }
  return true;
}

std::unexpected<Error> BadPolicy(std::string message) {
  return std::unexpected(Error{ErrorCode::kBadPolicy, std::move(message)});
}

std::optional<uint16_t> ParsePort(std::string_view s) {
  unsigned v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size() || v == 0 || v > 65535) return std::nullopt;
  return static_cast<uint16_t>(v);
}

std::expected<std::vector<PortRange>, Error> ParsePorts(std::string_view s) {
  std::vector<PortRange> out;
  while (true) {
    size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    size_t dash = item.find('-');
    auto first = ParsePort(item.substr(0, dash));
    auto last = dash == std::string_view::npos ? first : ParsePort(item.substr(dash + 1));
    if (!first || !last || *last < *first)
      return BadPolicy(fmt::format("'{}' is not a port or port range (1-65535)", item));
    out.push_back({*first, *last});
    if (out.size() > 64) return BadPolicy("at most 64 port ranges in a rule");
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

std::string PortsText(const std::vector<PortRange>& ports) {
  std::string s;
  for (const auto& r : ports) {
    if (!s.empty()) s += ',';
    s += r.first == r.last ? fmt::format("{}", r.first) : fmt::format("{}-{}", r.first, r.last);
  }
  return s;
}

}  // namespace

// The IPv4 address a v6 address stands for (v4-mapped ::ffff:a.b.c.d, NAT64 64:ff9b::a.b.c.d).
std::optional<ip::address> EmbeddedV4(const ip::address_v6& v6) {
  if (v6.is_v4_mapped()) return ip::address(ip::make_address_v4(ip::v4_mapped, v6));
  auto b = v6.to_bytes();
  static const std::array<uint8_t, 12> nat64{0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0};
  if (std::equal(nat64.begin(), nat64.end(), b.begin()))
    return ip::address(ip::address_v4(ip::address_v4::bytes_type{b[12], b[13], b[14], b[15]}));
  return std::nullopt;
}

namespace {

Verdict Allowed(const Rule* r) { return {true, r ? r->text : "default", ""}; }
Verdict Denied(const Rule* r, std::string reason) { return {false, r ? r->text : "default", std::move(reason)}; }

}  // namespace

bool Cidr::Contains(const ip::address& a) const {
  if (a.is_v6() && base.is_v6()) return PrefixEqual(Bytes16(a), Bytes16(base), prefix);
  if (a.is_v4() && base.is_v4()) return PrefixEqual(Bytes16(a), Bytes16(base), 96 + prefix);
  // A v4-mapped v6 address, or one under the NAT64 well-known prefix, reaches the v4 address.
  if (a.is_v6() && base.is_v4()) {
    if (auto v4 = EmbeddedV4(a.to_v6())) return Contains(*v4);
  }
  return false;
}

std::string Cidr::ToString() const { return fmt::format("{}/{}", base.to_string(), prefix); }

std::expected<Cidr, Error> ParseCidr(std::string_view text) {
  if (text.find('\0') != std::string_view::npos) return BadPolicy("an address has no NUL bytes");
  size_t slash = text.find('/');
  std::string addr(text.substr(0, slash));
  boost::system::error_code ec;
  ip::address a = ip::make_address(addr, ec);
  if (ec || addr.find('%') != std::string::npos)
    return BadPolicy(fmt::format("'{}' is not an IP address", addr));
  unsigned max = a.is_v4() ? 32 : 128, prefix = max;
  if (slash != std::string_view::npos) {
    std::string_view p = text.substr(slash + 1);
    auto [end, e] = std::from_chars(p.data(), p.data() + p.size(), prefix);
    if (p.empty() || e != std::errc() || end != p.data() + p.size() || prefix > max)
      return BadPolicy(fmt::format("'{}' is not a prefix length (0-{})", p, max));
  }
  Cidr c{a, prefix};
  // Host bits must be zero: "10.1.2.3/8" is more likely a mistake than a wish.
  auto bytes = Bytes16(a);
  unsigned bits = (a.is_v4() ? 96 : 0) + prefix;
  for (unsigned i = 0; i < 128; ++i) {
    if (i < bits) continue;
    if (bytes[i / 8] & (0x80 >> (i % 8)))
      return BadPolicy(fmt::format("'{}' has host bits set beyond /{}", text, prefix));
  }
  return c;
}

bool Rule::MatchesName(std::string_view name) const {
  if (kind == Kind::kDomain) return name == domain;
  if (kind == Kind::kWildcard)
    return name.size() > domain.size() + 1 && name.ends_with(domain) &&
           name[name.size() - domain.size() - 1] == '.';
  return false;
}

bool Rule::MatchesAddress(const ip::address& a) const { return kind == Kind::kCidr && cidr.Contains(a); }

bool Rule::MatchesPort(uint16_t port) const {
  if (ports.empty()) return true;
  return std::any_of(ports.begin(), ports.end(), [port](const PortRange& r) { return port >= r.first && port <= r.last; });
}

std::expected<Rule, Error> ParseRule(std::string_view text) {
  if (text.empty() || text.size() > 300) return BadPolicy("a rule is 1 to 300 characters");
  Rule r;
  std::string_view target = text, ports;
  if (text.front() == '[') {  // [v6 or v6/len]:ports
    size_t close = text.find(']');
    if (close == std::string_view::npos) return BadPolicy("'[' without ']'");
    target = text.substr(1, close - 1);
    if (target.find(':') == std::string_view::npos)
      return BadPolicy("brackets are for IPv6 addresses only");
    std::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest.front() != ':') return BadPolicy("after ']' only ':ports' may follow");
      ports = rest.substr(1);
      if (ports.empty()) return BadPolicy("':' without ports");
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {  // name:ports or v4:ports
    size_t colon = text.find(':');
    target = text.substr(0, colon);
    ports = text.substr(colon + 1);
    if (ports.empty()) return BadPolicy("':' without ports");
  }
  if (!ports.empty()) {
    auto p = ParsePorts(ports);
    if (!p) return std::unexpected(std::move(p.error()));
    r.ports = std::move(*p);
  }
  bool looks_address = target.find(':') != std::string_view::npos || target.find('/') != std::string_view::npos ||
                       (!target.empty() && target.find_first_not_of("0123456789.") == std::string_view::npos);
  if (looks_address) {
    auto c = ParseCidr(target);
    if (!c) return std::unexpected(std::move(c.error()));
    r.kind = Rule::Kind::kCidr;
    r.cidr = *c;
    std::string base = c->ToString();
    r.text = r.ports.empty() ? base : c->base.is_v6() ? fmt::format("[{}]:{}", base, PortsText(r.ports))
                                                       : fmt::format("{}:{}", base, PortsText(r.ports));
    return r;
  }
  std::string_view name = target;
  if (name.starts_with("*.")) {
    r.kind = Rule::Kind::kWildcard;
    name.remove_prefix(2);
  }
  if (name.find('*') != std::string_view::npos)
    return BadPolicy("'*' is allowed only as the first label (\"*.example.com\")");
  auto n = NormalizeName(name);
  if (!n || n->empty() || IsAddressLiteral(*n))
    return BadPolicy(fmt::format("'{}' is not a domain name", name));
  if (r.kind == Rule::Kind::kWildcard && n->find('.') == std::string::npos)
    return BadPolicy(fmt::format("'*.{}' would match a whole top-level domain", *n));
  r.domain = *n;
  std::string base = r.kind == Rule::Kind::kWildcard ? "*." + *n : *n;
  r.text = r.ports.empty() ? base : fmt::format("{}:{}", base, PortsText(r.ports));
  return r;
}

std::expected<Policy, Error> ParsePolicy(const json& j, DefaultAction fallback) {
  if (!j.is_object()) return BadPolicy("egress must be an object");
  Policy p;
  p.default_action = fallback;
  for (const auto& [key, value] : j.items()) {
    if (key == "default") {
      if (value == "deny") p.default_action = DefaultAction::kDeny;
      else if (value == "allow") p.default_action = DefaultAction::kAllow;
      else return BadPolicy("egress.default must be \"deny\" or \"allow\"");
    } else if (key == "allow" || key == "deny") {
      if (!value.is_array())
        return BadPolicy(fmt::format("egress.{} must be an array of rules", key));
      if (value.size() > kMaxRules)
        return BadPolicy(fmt::format("egress.{} has more than {} rules", key, kMaxRules));
      auto& list = key == "allow" ? p.allow : p.deny;
      for (size_t i = 0; i < value.size(); ++i) {
        if (!value[i].is_string())
          return BadPolicy(fmt::format("egress.{}[{}] must be a string", key, i));
        auto r = ParseRule(value[i].get<std::string>());
        if (!r) return BadPolicy(fmt::format("egress.{}[{}]: {}", key, i, r.error().message));
        list.push_back(std::move(*r));
      }
    } else {
      return BadPolicy(fmt::format("egress.{} is not a known field (default, allow, deny)", key));
    }
  }
  return p;
}

json PolicyJson(const Policy& p) {
  json allow = json::array(), deny = json::array();
  for (const auto& r : p.allow) allow.push_back(r.text);
  for (const auto& r : p.deny) deny.push_back(r.text);
  return {{"default", p.default_action == DefaultAction::kAllow ? "allow" : "deny"}, {"allow", allow}, {"deny", deny}};
}

Verdict DecideName(const Policy& p, std::string_view name) {
  // A deny rule for the name on some ports only does not stop resolving it.
  for (const auto& r : p.deny)
    if (r.IsName() && r.AllPorts() && r.MatchesName(name)) return Denied(&r, "denied by rule");
  for (const auto& r : p.allow)
    if (r.IsName() && r.MatchesName(name)) return Allowed(&r);
  if (p.default_action == DefaultAction::kAllow) return Allowed(nullptr);
  return Denied(nullptr, "not in the allowlist");
}

Verdict DecideNamedConnection(const Policy& p, std::string_view name, uint16_t port) {
  for (const auto& r : p.deny)
    if (r.IsName() && r.MatchesName(name) && r.MatchesPort(port)) return Denied(&r, "denied by rule");
  for (const auto& r : p.allow)
    if (r.IsName() && r.MatchesName(name) && r.MatchesPort(port)) return Allowed(&r);
  if (p.default_action == DefaultAction::kAllow) return Allowed(nullptr);
  return Denied(nullptr, "not in the allowlist");
}

Verdict CheckResolvedAddress(const Policy& p, const ip::address& a, uint16_t port) {
  for (const auto& r : p.deny)
    if (r.MatchesAddress(a) && r.MatchesPort(port)) return Denied(&r, "address denied by rule");
  return Allowed(nullptr);
}

Verdict DecideAddressConnection(const Policy& p, const ip::address& a, uint16_t port) {
  for (const auto& r : p.deny)
    if (r.MatchesAddress(a) && r.MatchesPort(port)) return Denied(&r, "denied by rule");
  for (const auto& r : p.allow)
    if (r.MatchesAddress(a) && r.MatchesPort(port)) return Allowed(&r);
  if (p.default_action == DefaultAction::kAllow) return Allowed(nullptr);
  return Denied(nullptr, "no host name and the address is not in the allowlist");
}

Reachability::Reachability(std::vector<Cidr> operator_reachable) : reachable_(std::move(operator_reachable)) {}

std::optional<std::string> Reachability::Forbidden(const ip::address& in) const {
  ip::address a = in;
  // Addresses that carry an IPv4 address reach it: judge the IPv4 address.
  if (a.is_v6()) {
    if (auto v4 = EmbeddedV4(a.to_v6())) a = *v4;
  }
  for (const auto& c : reachable_)
    if (c.Contains(a) || c.Contains(in)) return std::nullopt;
  struct Range {
    const char* cidr;
    const char* why;
  };
  static const Range kRanges[] = {
      {"169.254.169.254/32", "cloud metadata"}, {"fd00:ec2::254/128", "cloud metadata"},
      {"0.0.0.0/8", "unspecified"},            {"10.0.0.0/8", "private"},
      {"100.64.0.0/10", "CGNAT"},               {"127.0.0.0/8", "loopback"},
      {"169.254.0.0/16", "link-local"},         {"172.16.0.0/12", "private"},
      {"192.0.0.0/24", "reserved"},             {"192.168.0.0/16", "private"},
      {"198.18.0.0/15", "reserved"},            {"224.0.0.0/4", "multicast"},
      {"240.0.0.0/4", "reserved"},              {"::/128", "unspecified"},
      {"::1/128", "loopback"},                  {"::/96", "reserved (IPv4-compatible)"},
      {"64:ff9b:1::/48", "reserved (local NAT64)"}, {"2002::/16", "reserved (6to4)"},
      {"100::/64", "reserved"},
      {"fc00::/7", "private"},                  {"fe80::/10", "link-local"},
      {"fec0::/10", "reserved"},                {"ff00::/8", "multicast"},
  };
  static const std::vector<std::pair<Cidr, const char*>> ranges = [] {
    std::vector<std::pair<Cidr, const char*>> v;
    for (const auto& r : kRanges) v.emplace_back(*ParseCidr(r.cidr), r.why);
    return v;
  }();
  for (const auto& [c, why] : ranges)
    if (c.Contains(a)) return std::string(why);
  return std::nullopt;
}

}  // namespace deskbox::egress
