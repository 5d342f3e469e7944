#pragma once
// The fixed layout of every sandbox's network slot. Each slot is its own network namespace, so
// every guest has the same addresses (docs/guest.md is the contract the guest image keeps): the
// guest at .2, the host side of its tap at .1 (the guest's gateway and resolver, where egress
// listens), the guest's RFB and DevTools ports. The jailer's ip and nftables setup, vmhost's and
// the CDP proxy's connections to the guest and egress's address guard all take them from here,
// so that they cannot drift apart. It lives in common because those components may not depend
// on each other (docs/design.md).
#include <cstdint>
#include <string>

namespace deskbox::slot_network {

inline constexpr char kGuestIPv4[] = "10.88.0.2";
inline constexpr char kGuestIPv6[] = "fd88:de5b::2";
inline constexpr char kHostIPv4[] = "10.88.0.1";  // the guest's gateway and resolver
inline constexpr char kHostIPv6[] = "fd88:de5b::1";
inline constexpr unsigned kPrefixLength4 = 24;
inline constexpr unsigned kPrefixLength6 = 64;
inline constexpr char kNet4[] = "10.88.0.0/24";  // the tap's networks: never a destination
inline constexpr char kNet6[] = "fd88:de5b::/64";

// Xvnc, and Chromium's DevTools (published on the guest's address by its forwarder).
inline constexpr uint16_t kGuestRfbPort = 5900;
inline constexpr uint16_t kGuestCdpPort = 9222;

// Where the slot's nftables send the guest's TCP (any destination) and UDP 53: egress's proxy
// and DNS responder on the host side of the tap.
inline constexpr uint16_t kEgressProxyPort = 15001;
inline constexpr uint16_t kEgressDnsPort = 15053;

// "10.88.0.2:<port>": the Host header or WebSocket handshake host for a guest service. Always
// the fixed address, never a name the guest gave.
inline std::string GuestHostPort(uint16_t port) {
  return std::string(kGuestIPv4) + ":" + std::to_string(port);
}
inline std::string GuestCdpHostPort() {
  return GuestHostPort(kGuestCdpPort);
}

}  // namespace deskbox::slot_network
