#pragma once
// Packets the sandbox's nftables rules refused (UDP including QUIC, ICMP, other protocols), as the
// kernel reports them on an NFLOG netlink socket (nfnetlink_log): parse the netlink messages into
// what the audit log needs. Sans-IO and bounded; the datagrams come from the kernel but carry the
// guest's packet headers, so they are treated as untrusted (fuzzed by tests/egress/nflog_fuzz.cc).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deskbox::egress::nflog {

inline constexpr uint16_t kGroup = 7;           // the nft `log group` the slot ruleset uses
inline constexpr uint32_t kCopyRange = 128;     // bytes of each packet copied: IP + L4 headers

struct DroppedPacket {
  std::string prefix;       // the rule's log prefix (e.g. "udp", "icmp", "other")
  uint8_t family = 0;       // 4 or 6
  std::string protocol;     // "udp", "tcp", "icmp", "icmpv6" or the protocol number
  std::string source;       // address text
  std::string destination;  // address text
  uint16_t port = 0;        // destination port for UDP/TCP, else 0
};

// Every NFULNL_MSG_PACKET in one datagram read from the socket; other messages (errors, acks)
// and packets too short to read are skipped.
std::vector<DroppedPacket> ParsePackets(std::span<const uint8_t> datagram);

// The netlink messages that make an NFLOG socket receive group `group` with `copy_range` bytes
// of each packet: NFULNL_CFG_CMD_BIND, then NFULA_CFG_MODE (NFULNL_COPY_PACKET). Send each as one
// datagram to the kernel (nl_pid 0), in order; the socket must be AF_NETLINK/NETLINK_NETFILTER.
// Needs CAP_NET_ADMIN in the netns: the jailer sends them before handing the socket over.
std::vector<std::vector<uint8_t>> BindMessages(uint16_t group, uint32_t copy_range);

}  // namespace deskbox::egress::nflog
