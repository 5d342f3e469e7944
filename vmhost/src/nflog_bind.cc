#include "vmhost/nflog_bind.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/files.h"

namespace deskbox::vmhost::nflog {
namespace {

constexpr uint16_t kConfigMessage = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
constexpr size_t kAttributesOffset = NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg));

// A netlink message of `type` carrying one nfnetlink_log config attribute.
std::vector<uint8_t> ConfigMessage(uint16_t group, uint32_t seq, uint16_t attribute_type,
                                   const void* value, size_t value_size) {
  const size_t attribute_length = NLA_HDRLEN + value_size;
  std::vector<uint8_t> out(kAttributesOffset + NLA_ALIGN(attribute_length), 0);
  nlmsghdr header{};
  header.nlmsg_len = static_cast<uint32_t>(out.size());
  header.nlmsg_type = kConfigMessage;
  header.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
  header.nlmsg_seq = seq;
  header.nlmsg_pid = 0;
  nfgenmsg gen{};
  gen.nfgen_family = AF_UNSPEC;
  gen.version = NFNETLINK_V0;
  gen.res_id = htons(group);
  nlattr attribute{};
  attribute.nla_len = static_cast<uint16_t>(attribute_length);
  attribute.nla_type = attribute_type;
  std::memcpy(out.data(), &header, sizeof header);
  std::memcpy(out.data() + NLMSG_HDRLEN, &gen, sizeof gen);
  std::memcpy(out.data() + kAttributesOffset, &attribute, sizeof attribute);
  std::memcpy(out.data() + kAttributesOffset + NLA_HDRLEN, value, value_size);
  return out;
}

enum class AckSeen { kNone, kOk, kError };

// Looks for the acknowledgement of `seq` among the netlink messages of one datagram, reading
// headers only. A header whose length does not fit ends the walk: nothing after it can be
// framed.
AckSeen FindAck(const uint8_t* data, size_t size, uint32_t seq, int* error) {
  for (size_t at = 0; size - at >= NLMSG_HDRLEN;) {
    nlmsghdr header;
    std::memcpy(&header, data + at, sizeof header);
    if (header.nlmsg_len < NLMSG_HDRLEN || header.nlmsg_len > size - at) break;
    if (header.nlmsg_type == NLMSG_ERROR && header.nlmsg_seq == seq &&
        header.nlmsg_len >= NLMSG_HDRLEN + sizeof(nlmsgerr)) {
      nlmsgerr ack;
      std::memcpy(&ack, data + at + NLMSG_HDRLEN, sizeof ack);
      if (ack.error == 0) return AckSeen::kOk;
      *error = -ack.error;
      return AckSeen::kError;
    }
    at += NLMSG_ALIGN(header.nlmsg_len);
  }
  return AckSeen::kNone;
}

}  // namespace

std::vector<std::vector<uint8_t>> BindMessages(uint16_t group, uint32_t copy_range) {
  nfulnl_msg_config_cmd command{};
  command.command = NFULNL_CFG_CMD_BIND;
  nfulnl_msg_config_mode mode{};
  mode.copy_range = htonl(copy_range);
  mode.copy_mode = NFULNL_COPY_PACKET;
  return {ConfigMessage(group, 1, NFULA_CFG_CMD, &command, sizeof command),
          ConfigMessage(group, 2, NFULA_CFG_MODE, &mode, sizeof mode)};
}

std::expected<void, std::string> AwaitAck(int fd, uint32_t seq, std::chrono::milliseconds timeout) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + timeout;
  // Acknowledgements are small and come alone; a larger datagram (a burst of packets) is read
  // truncated, which is fine since only its headers are looked at.
  std::array<uint8_t, 8192> buffer;
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return std::unexpected(fmt::format("poll: {}", ErrnoString(errno)));
    if (ready == 0) break;
    ssize_t n = ::recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
      // ENOBUFS: the socket overflowed and the acknowledgement may be among what was lost.
      return std::unexpected(fmt::format("receive: {}", ErrnoString(errno)));
    }
    if (n == 0 && (p.revents & POLLHUP)) return std::unexpected("the socket was closed");
    int error = 0;
    switch (FindAck(buffer.data(), static_cast<size_t>(n), seq, &error)) {
      case AckSeen::kOk:
        return {};
      case AckSeen::kError:
        return std::unexpected(fmt::format("refused: {}", ErrnoString(error)));
      case AckSeen::kNone:
        break;
    }
  }
  return std::unexpected(fmt::format("no acknowledgement in {} ms", timeout.count()));
}

std::expected<void, std::string> BindGroup(int fd, uint16_t group, uint32_t copy_range,
                                           std::chrono::milliseconds timeout_each) {
  for (const auto& m : BindMessages(group, copy_range)) {
    nlmsghdr header;
    std::memcpy(&header, m.data(), sizeof header);
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (::sendto(fd, m.data(), m.size(), 0, reinterpret_cast<sockaddr*>(&kernel), sizeof kernel) <
        0)
      return std::unexpected(fmt::format("nflog config: {}", ErrnoString(errno)));
    if (auto ack = AwaitAck(fd, header.nlmsg_seq, timeout_each); !ack)
      return std::unexpected(fmt::format("nflog config: {}", ack.error()));
  }
  return {};
}

}  // namespace deskbox::vmhost::nflog
