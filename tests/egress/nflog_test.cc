#include "egress/nflog.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include <cstring>
#include <string>
#include <vector>

namespace deskbox::egress::nflog {
namespace {

constexpr uint16_t kPacketType = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
constexpr uint16_t kLogGroup = 7;  // any group: the parser does not look at it

template <typename T>
void AppendHost(std::vector<uint8_t>& out, T value) {
  uint8_t bytes[sizeof value];
  std::memcpy(bytes, &value, sizeof value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

// Netlink datagrams the way the kernel lays them out: nlmsghdr, nfgenmsg, aligned attributes.
struct Datagram {
  std::vector<uint8_t> bytes;
  size_t message_start = 0;

  Datagram& Begin(uint16_t type, uint8_t family) {
    message_start = bytes.size();
    AppendHost(bytes, nlmsghdr{0, type, 0, 0, 0});
    AppendHost(bytes, nfgenmsg{family, NFNETLINK_V0, htons(kLogGroup)});
    return *this;
  }
  Datagram& Attribute(uint16_t type, const std::vector<uint8_t>& value) {
    AppendHost(bytes, nlattr{static_cast<uint16_t>(NLA_HDRLEN + value.size()), type});
    bytes.insert(bytes.end(), value.begin(), value.end());
    bytes.resize(NLA_ALIGN(bytes.size()), 0);
    return *this;
  }
  Datagram& End() {
    uint32_t length = static_cast<uint32_t>(bytes.size() - message_start);
    std::memcpy(bytes.data() + message_start, &length, sizeof length);
    return *this;
  }
  // A typical NFULNL_MSG_PACKET: packet header, mark, prefix, then the payload.
  Datagram& Packet(uint8_t family, std::string_view prefix, const std::vector<uint8_t>& payload) {
    Begin(kPacketType, family);
    Attribute(NFULA_PACKET_HDR, {0x86, 0xdd, 3, 0});
    Attribute(NFULA_MARK, {0, 0, 0, 0});
    std::vector<uint8_t> text(prefix.begin(), prefix.end());
    text.push_back(0);
    Attribute(NFULA_PREFIX, text);
    Attribute(NFULA_PAYLOAD | NLA_F_NET_BYTEORDER, payload);
    return End();
  }
};

std::vector<uint8_t> Ipv4(uint8_t protocol, std::vector<uint8_t> l4, uint16_t fragment = 0x4000,
                          std::vector<uint8_t> options = {}) {
  uint8_t ihl = static_cast<uint8_t>(5 + options.size() / 4);
  uint16_t total = static_cast<uint16_t>(ihl * 4 + l4.size());
  std::vector<uint8_t> p = {static_cast<uint8_t>(0x40 | ihl),
                            0,
                            uint8_t(total >> 8),
                            uint8_t(total),
                            0x12,
                            0x34,
                            uint8_t(fragment >> 8),
                            uint8_t(fragment),
                            64,
                            protocol,
                            0,
                            0,
                            10,
                            0,
                            2,
                            15,
                            142,
                            250,
                            1,
                            1};
  p.insert(p.end(), options.begin(), options.end());
  p.insert(p.end(), l4.begin(), l4.end());
  return p;
}

std::vector<uint8_t> Ipv6(uint8_t next_header, std::vector<uint8_t> l4) {
  std::vector<uint8_t> p = {0x60,        0,  0, 0, uint8_t(l4.size() >> 8), uint8_t(l4.size()),
                            next_header, 255};
  in6_addr source, destination;
  inet_pton(AF_INET6, "fd00::2", &source);
  inet_pton(AF_INET6, "2001:db8::1", &destination);
  p.insert(p.end(), source.s6_addr, source.s6_addr + 16);
  p.insert(p.end(), destination.s6_addr, destination.s6_addr + 16);
  p.insert(p.end(), l4.begin(), l4.end());
  return p;
}

const std::vector<uint8_t> kUdpTo443 = {0xc7, 0x38, 0x01, 0xbb, 0x00, 0x10, 0x00, 0x00,
                                        0xc3, 0x00, 0x00, 0x00, 0x01, 0x08, 0xaa, 0xbb};
const std::vector<uint8_t> kEchoRequest = {128, 0, 0x12, 0x34, 0, 1, 0, 1};

TEST(NflogTest, TwoPacketsInOneDatagram) {
  Datagram d;
  d.Packet(AF_INET, "udp", Ipv4(17, kUdpTo443));
  d.Packet(AF_INET6, "icmp", Ipv6(58, kEchoRequest));
  auto packets = ParsePackets(d.bytes);
  ASSERT_EQ(packets.size(), 2u);

  EXPECT_EQ(packets[0].prefix, "udp");
  EXPECT_EQ(packets[0].family, 4);
  EXPECT_EQ(packets[0].protocol, "udp");
  EXPECT_EQ(packets[0].source, "10.0.2.15");
  EXPECT_EQ(packets[0].destination, "142.250.1.1");
  EXPECT_EQ(packets[0].port, 443);

  EXPECT_EQ(packets[1].prefix, "icmp");
  EXPECT_EQ(packets[1].family, 6);
  EXPECT_EQ(packets[1].protocol, "icmpv6");
  EXPECT_EQ(packets[1].source, "fd00::2");
  EXPECT_EQ(packets[1].destination, "2001:db8::1");
  EXPECT_EQ(packets[1].port, 0);
}

TEST(NflogTest, ProtocolsAndHeaderForms) {
  const std::vector<uint8_t> tcp_syn = {0xd4, 0x31, 0x00, 0x16, 0,    0,    0,    1,
                                        0,    0,    0,    0,    0x50, 0x02, 0xff, 0xff};
  Datagram d;
  d.Packet(AF_INET, "other", Ipv4(6, tcp_syn, 0x4000, {1, 1, 1, 0}));  // IHL 6: an option
  d.Packet(AF_INET, "udp", Ipv4(17, kUdpTo443, 0x2010));               // a later fragment
  d.Packet(AF_INET, "icmp", Ipv4(1, {8, 0, 0, 0}));
  d.Packet(AF_INET, "other", Ipv4(47, {0, 0, 0x08, 0x00}));  // GRE
  d.Packet(AF_INET6, "udp", Ipv6(17, kUdpTo443));
  d.Packet(AF_INET6, "other", Ipv6(0, {17, 0, 0, 0, 0, 0, 0, 0}));  // hop-by-hop first
  d.Packet(AF_INET, "udp", Ipv4(17, {0xc7, 0x38}));                 // L4 header cut short
  auto packets = ParsePackets(d.bytes);
  ASSERT_EQ(packets.size(), 7u);
  EXPECT_EQ(packets[0].protocol, "tcp");
  EXPECT_EQ(packets[0].port, 22);
  EXPECT_EQ(packets[1].protocol, "udp");
  EXPECT_EQ(packets[1].port, 0);
  EXPECT_EQ(packets[2].protocol, "icmp");
  EXPECT_EQ(packets[3].protocol, "47");
  EXPECT_EQ(packets[3].port, 0);
  EXPECT_EQ(packets[4].family, 6);
  EXPECT_EQ(packets[4].port, 443);
  EXPECT_EQ(packets[5].protocol, "0");
  EXPECT_EQ(packets[5].port, 0);
  EXPECT_EQ(packets[6].protocol, "udp");
  EXPECT_EQ(packets[6].port, 0);
}

TEST(NflogTest, UnreadablePacketsAreSkipped) {
  auto v4 = Ipv4(17, kUdpTo443);
  auto short_v4 = v4;
  short_v4.resize(19);
  auto small_ihl = v4;
  small_ihl[0] = 0x44;
  auto big_ihl = Ipv4(17, {});
  big_ihl[0] = 0x46;
  auto short_v6 = Ipv6(17, {});
  short_v6.resize(39);

  Datagram d;
  d.Packet(AF_INET6, "udp", v4);  // family says IPv6, packet says 4
  d.Packet(AF_INET, "udp", Ipv6(17, kUdpTo443));
  d.Packet(7, "udp", v4);  // a bridge family
  d.Packet(AF_INET, "udp", short_v4);
  d.Packet(AF_INET, "udp", small_ihl);
  d.Packet(AF_INET, "udp", big_ihl);
  d.Packet(AF_INET6, "udp", short_v6);
  d.Packet(AF_INET, "udp", {});
  d.Begin(kPacketType, AF_INET).Attribute(NFULA_PREFIX, {'x', 0}).End();  // no payload
  d.Begin(NLMSG_ERROR, AF_UNSPEC).Attribute(NFULA_PAYLOAD, v4).End();     // not a packet
  d.Begin((NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG, AF_INET).Attribute(NFULA_PAYLOAD, v4).End();
  d.Packet(AF_INET, "last", v4);
  auto packets = ParsePackets(d.bytes);
  ASSERT_EQ(packets.size(), 1u);
  EXPECT_EQ(packets[0].prefix, "last");
}

TEST(NflogTest, TruncatedAttributesEndTheWalkSafely) {
  auto v4 = Ipv4(17, kUdpTo443);
  // The payload comes first, then an attribute claiming more than the message holds.
  Datagram d;
  d.Begin(kPacketType, AF_INET).Attribute(NFULA_PAYLOAD, v4);
  AppendHost(d.bytes, nlattr{200, NFULA_PREFIX});
  d.bytes.insert(d.bytes.end(), {'u', 'd', 'p', 0});
  d.End();
  // A prefix, then an attribute of length 2 (less than its own header) before the payload.
  d.Begin(kPacketType, AF_INET).Attribute(NFULA_PREFIX, {'a', 0});
  AppendHost(d.bytes, nlattr{2, NFULA_MARK});
  d.Attribute(NFULA_PAYLOAD, v4).End();
  // Half an attribute header at the end of the message.
  d.Begin(kPacketType, AF_INET).Attribute(NFULA_PAYLOAD, v4);
  d.bytes.insert(d.bytes.end(), {8, 0});
  d.End();
  auto packets = ParsePackets(d.bytes);
  ASSERT_EQ(packets.size(), 2u);
  EXPECT_EQ(packets[0].prefix, "");
  EXPECT_EQ(packets[0].port, 443);
  EXPECT_EQ(packets[1].port, 443);

  // A payload attribute cut by the end of the message is not read beyond it.
  Datagram cut;
  cut.Begin(kPacketType, AF_INET).Attribute(NFULA_PAYLOAD, v4).End();
  uint32_t shorter = static_cast<uint32_t>(cut.bytes.size() - 8);
  std::memcpy(cut.bytes.data(), &shorter, sizeof shorter);
  EXPECT_TRUE(ParsePackets(cut.bytes).empty());
}

TEST(NflogTest, BrokenMessageLengthsStopTheDatagram) {
  auto v4 = Ipv4(17, kUdpTo443);
  Datagram d;
  d.Packet(AF_INET, "first", v4);
  size_t second = d.bytes.size();
  d.Packet(AF_INET, "second", v4);
  auto overlong = d.bytes;
  uint32_t length = static_cast<uint32_t>(overlong.size() - second + 1);
  std::memcpy(overlong.data() + second, &length, sizeof length);
  auto packets = ParsePackets(overlong);
  ASSERT_EQ(packets.size(), 1u);
  EXPECT_EQ(packets[0].prefix, "first");

  auto tiny = d.bytes;
  length = 3;
  std::memcpy(tiny.data() + second, &length, sizeof length);
  EXPECT_EQ(ParsePackets(tiny).size(), 1u);

  auto cut = d.bytes;
  cut.resize(second + 10);
  EXPECT_EQ(ParsePackets(cut).size(), 1u);
  EXPECT_TRUE(ParsePackets({}).empty());
}

TEST(NflogTest, PrefixIsPrintableAndBounded) {
  Datagram d;
  d.Begin(kPacketType, AF_INET)
      .Attribute(NFULA_PREFIX, {'u', 0x01, 0xc3, 0xa9, 'p'})
      .Attribute(NFULA_PAYLOAD, Ipv4(17, kUdpTo443))
      .End();
  d.Packet(AF_INET, std::string(300, 'x'), Ipv4(17, kUdpTo443));
  auto packets = ParsePackets(d.bytes);
  ASSERT_EQ(packets.size(), 2u);
  EXPECT_EQ(packets[0].prefix, "u???p");
  EXPECT_EQ(packets[1].prefix, std::string(127, 'x'));
}

}  // namespace
}  // namespace deskbox::egress::nflog
