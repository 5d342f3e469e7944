#pragma once
// Where egress lives inside every sandbox's netns (the guest side is fixed in docs/guest.md):
// the slot's nftables send the guest's TCP to the proxy port and its UDP 53 to the DNS port on
// the host side of the tap. The jailer binds these sockets; deskboxd serves them.
#include <cstdint>

namespace deskbox::egress {

inline constexpr char kHostIPv4[] = "10.88.0.1";     // the guest's gateway and resolver
inline constexpr char kHostIPv6[] = "fd88:de5b::1";
inline constexpr char kSandboxNet4[] = "10.88.0.0/24";  // the tap's networks: never a destination
inline constexpr char kSandboxNet6[] = "fd88:de5b::/64";
inline constexpr uint16_t kProxyPort = 15001;
inline constexpr uint16_t kDnsPort = 15053;

}  // namespace deskbox::egress
