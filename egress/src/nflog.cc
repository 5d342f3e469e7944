#include "egress/nflog.h"

#include <arpa/inet.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include <cstring>
#include <optional>

namespace deskbox::egress::nflog {
namespace {

constexpr uint16_t kPacketMessage = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
constexpr size_t kAttributesOffset = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));
constexpr size_t kMaxPrefix = 127;  // NF_LOG_PREFIXLEN less its NUL

constexpr uint8_t kProtoIcmp = 1, kProtoTcp = 6, kProtoUdp = 17, kProtoIcmpv6 = 58;
constexpr size_t kIpv4MinHeader = 20, kIpv6Header = 40;

// Netlink headers are in host byte order; the copied packet is in network byte order.
template <typename T>
T ReadHost(std::span<const uint8_t> bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  return value;
}

uint16_t ReadBig16(std::span<const uint8_t> bytes, size_t at) {
  return static_cast<uint16_t>(bytes[at] << 8 | bytes[at + 1]);
}

std::string AddressText(int family, const uint8_t* address) {
  char buffer[INET6_ADDRSTRLEN] = {};
  inet_ntop(family, address, buffer, sizeof buffer);
  return buffer;
}

std::string ProtocolName(uint8_t protocol) {
  switch (protocol) {
    case kProtoIcmp:
      return "icmp";
    case kProtoTcp:
      return "tcp";
    case kProtoUdp:
      return "udp";
    case kProtoIcmpv6:
      return "icmpv6";
    default:
      return std::to_string(protocol);
  }
}

// The prefix ends up in JSON audit records, which must be valid UTF-8: keep printable ASCII.
std::string PrefixText(std::span<const uint8_t> attribute) {
  std::string prefix;
  for (uint8_t c : attribute) {
    if (c == 0 || prefix.size() == kMaxPrefix) break;
    prefix += c >= 0x20 && c < 0x7F ? static_cast<char>(c) : '?';
  }
  return prefix;
}

// Fills addresses, protocol and port from the network-layer packet; false if it is too short or
// not of the family the kernel said.
bool ParseNetworkPacket(uint8_t nfgen_family, std::span<const uint8_t> ip, DroppedPacket& out) {
  if (ip.empty()) return false;
  uint8_t version = ip[0] >> 4;
  uint8_t protocol;
  std::span<const uint8_t> l4;
  if (nfgen_family == AF_INET && version == 4) {
    size_t header_length = size_t{ip[0] & 0x0Fu} * 4;
    if (ip.size() < kIpv4MinHeader || header_length < kIpv4MinHeader || header_length > ip.size())
      return false;
    protocol = ip[9];
    out.source = AddressText(AF_INET, ip.data() + 12);
    out.destination = AddressText(AF_INET, ip.data() + 16);
    // Only the first fragment carries the L4 header.
    bool first_fragment = (ReadBig16(ip, 6) & 0x1FFF) == 0;
    if (first_fragment) l4 = ip.subspan(header_length);
  } else if (nfgen_family == AF_INET6 && version == 6) {
    if (ip.size() < kIpv6Header) return false;
    protocol = ip[6];  // extension headers are not walked: their number is reported
    out.source = AddressText(AF_INET6, ip.data() + 8);
    out.destination = AddressText(AF_INET6, ip.data() + 24);
    l4 = ip.subspan(kIpv6Header);
  } else {
    return false;
  }
  out.family = version;
  out.protocol = ProtocolName(protocol);
  if ((protocol == kProtoUdp || protocol == kProtoTcp) && l4.size() >= 4)
    out.port = ReadBig16(l4, 2);
  return true;
}

// One NFULNL_MSG_PACKET message, netlink header included.
std::optional<DroppedPacket> ParsePacketMessage(std::span<const uint8_t> message) {
  if (message.size() < kAttributesOffset) return std::nullopt;
  auto gen = ReadHost<nfgenmsg>(message, NLMSG_HDRLEN);
  std::optional<std::span<const uint8_t>> payload;
  std::string prefix;
  for (size_t at = kAttributesOffset; message.size() - at >= NLA_HDRLEN;) {
    auto attribute = ReadHost<nlattr>(message, at);
    // A length that is too small or overruns the message ends the walk: what follows is unusable.
    if (attribute.nla_len < NLA_HDRLEN || attribute.nla_len > message.size() - at) break;
    auto value = message.subspan(at + NLA_HDRLEN, attribute.nla_len - NLA_HDRLEN);
    switch (attribute.nla_type & NLA_TYPE_MASK) {
      case NFULA_PREFIX:
        prefix = PrefixText(value);
        break;
      case NFULA_PAYLOAD:
        payload = value;
        break;
      default:
        break;
    }
    at += NLA_ALIGN(attribute.nla_len);
    if (at > message.size()) break;
  }
  if (!payload) return std::nullopt;
  DroppedPacket packet;
  packet.prefix = std::move(prefix);
  if (!ParseNetworkPacket(gen.nfgen_family, *payload, packet)) return std::nullopt;
  return packet;
}

}  // namespace

std::vector<DroppedPacket> ParsePackets(std::span<const uint8_t> datagram) {
  std::vector<DroppedPacket> packets;
  for (size_t at = 0; datagram.size() - at >= NLMSG_HDRLEN;) {
    auto header = ReadHost<nlmsghdr>(datagram, at);
    if (header.nlmsg_len < NLMSG_HDRLEN || header.nlmsg_len > datagram.size() - at) break;
    if (header.nlmsg_type == kPacketMessage) {
      if (auto packet = ParsePacketMessage(datagram.subspan(at, header.nlmsg_len)))
        packets.push_back(std::move(*packet));
    }
    at += NLMSG_ALIGN(header.nlmsg_len);
    if (at > datagram.size()) break;
  }
  return packets;
}

}  // namespace deskbox::egress::nflog
