#pragma once
// Packets the sandbox's nftables rules refused (UDP including QUIC, ICMP, other protocols), as the
// kernel reports them on an NFLOG netlink socket (nfnetlink_log): parse the netlink messages into
// what the audit log needs. Sans-IO and bounded; the datagrams come from the kernel but carry the
// guest's packet headers, so they are treated as untrusted (fuzzed by tests/egress/nflog_fuzz.cc).
// The jailer binds the socket to the slot ruleset's log group (vmhost/nflog_bind.h) and hands it
// to deskboxd, which only reads it: the root process never parses these messages.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace deskbox::egress::nflog {

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

}  // namespace deskbox::egress::nflog
