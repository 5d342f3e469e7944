// NFLOG datagrams carry the guest's packet headers: ParsePackets must never crash or read past
// the datagram, and what it reports must be well-formed for the audit log.
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "egress/nflog.h"

namespace {

namespace nflog = deskbox::egress::nflog;

void Check(const std::vector<nflog::DroppedPacket>& packets) {
  for (const auto& p : packets) {
    if (p.family != 4 && p.family != 6) std::abort();
    if (p.source.empty() || p.destination.empty() || p.protocol.empty()) std::abort();
    if (p.port != 0 && p.protocol != "udp" && p.protocol != "tcp") std::abort();
    if (p.prefix.size() > 127) std::abort();
    for (char c : p.prefix)
      if (c < 0x20 || c > 0x7e) std::abort();
  }
}

template <typename T>
void AppendHost(std::vector<uint8_t>& out, const T& value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> input(data, size);
  Check(nflog::ParsePackets(input));

  // The input as the packet of a well-formed message, so that mutations reach the IP parsing.
  std::span<const uint8_t> payload = input.first(std::min<size_t>(size, 1024));
  std::vector<uint8_t> message;
  uint8_t family = size > 0 && (data[0] >> 4) == 6 ? AF_INET6 : AF_INET;
  AppendHost(message, nlmsghdr{0, (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET, 0, 0, 0});
  AppendHost(message, nfgenmsg{family, NFNETLINK_V0, 0});
  AppendHost(message, nlattr{static_cast<uint16_t>(NLA_HDRLEN + payload.size()), NFULA_PAYLOAD});
  message.insert(message.end(), payload.begin(), payload.end());
  message.resize(NLA_ALIGN(message.size()), 0);
  uint32_t length = static_cast<uint32_t>(message.size());
  std::memcpy(message.data(), &length, sizeof length);
  auto packets = nflog::ParsePackets(message);
  Check(packets);
  if (packets.size() > 1) std::abort();
  return 0;
}
