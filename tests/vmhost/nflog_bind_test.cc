// The jailer's NFLOG bind: the messages it sends, and its wait for the kernel's acknowledgements,
// fed crafted netlink datagrams through a socketpair. The wait must find the acknowledgement
// among packets the log group already delivers, and skip everything else unparsed.
#include "vmhost/nflog_bind.h"

#include <gtest/gtest.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "common/unique_fd.h"

namespace deskbox::vmhost::nflog {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

constexpr uint16_t kPacketType = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_PACKET;
constexpr uint16_t kConfigType = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;

template <typename T>
void AppendHost(Bytes& out, const T& value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof value);
}

// One netlink message: header (length filled in) and payload, padded to the alignment.
Bytes Message(uint16_t type, uint32_t seq, const Bytes& payload) {
  Bytes m;
  AppendHost(m, nlmsghdr{static_cast<uint32_t>(NLMSG_HDRLEN + payload.size()), type, 0, seq, 0});
  m.insert(m.end(), payload.begin(), payload.end());
  m.resize(NLMSG_ALIGN(m.size()), 0);
  return m;
}

// The kernel's acknowledgement of request `seq`: NLMSG_ERROR carrying the error (0: done) and
// the request's header.
Bytes Ack(uint32_t seq, int error) {
  Bytes payload;
  nlmsgerr e{};
  e.error = error;
  e.msg = nlmsghdr{28, kConfigType, NLM_F_REQUEST | NLM_F_ACK, seq, 0};
  AppendHost(payload, e);
  return Message(NLMSG_ERROR, seq, payload);
}

// A packet message as the log group sends it, with contents the jailer must never read: an
// attribute whose length overruns the message.
Bytes Packet(uint32_t seq = 0) {
  Bytes payload;
  AppendHost(payload, nfgenmsg{AF_INET, NFNETLINK_V0, 0x0700});
  AppendHost(payload, nlattr{0xFFFF, NFULA_PAYLOAD});
  payload.insert(payload.end(), {0x45, 0, 0, 0x1c});
  return Message(kPacketType, seq, payload);
}

Bytes Join(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

class AwaitAckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int fds[2];
    // SOCK_SEQPACKET keeps datagram boundaries, as netlink does.
    ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds), 0)
        << std::strerror(errno);
    jailer_side_ = UniqueFd(fds[0]);
    kernel_side_ = UniqueFd(fds[1]);
    int size = 1 << 20;
    ::setsockopt(kernel_side_.get(), SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    ::setsockopt(jailer_side_.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  }
  void Send(const Bytes& datagram) {
    ASSERT_EQ(::send(kernel_side_.get(), datagram.data(), datagram.size(), 0),
              static_cast<ssize_t>(datagram.size()))
        << std::strerror(errno);
  }
  // The datagrams AwaitAck left unread.
  std::vector<Bytes> Unread() {
    std::vector<Bytes> out;
    Bytes b(1 << 16);
    for (ssize_t n; (n = ::recv(jailer_side_.get(), b.data(), b.size(), MSG_DONTWAIT)) >= 0;)
      out.emplace_back(b.begin(), b.begin() + n);
    return out;
  }

  UniqueFd jailer_side_, kernel_side_;
};

TEST_F(AwaitAckTest, AckAlone) {
  Send(Ack(1, 0));
  EXPECT_TRUE(AwaitAck(jailer_side_.get(), 1, 1s).has_value());
}

TEST_F(AwaitAckTest, PacketsBeforeTheAckAreSkipped) {
  Send(Packet());
  Send(Join({Packet(), Packet()}));
  Send(Ack(1, 0));
  Send(Packet(9));
  auto r = AwaitAck(jailer_side_.get(), 1, 1s);
  EXPECT_TRUE(r.has_value()) << r.error();
  // Read up to the acknowledgement and no further.
  EXPECT_EQ(Unread(), std::vector<Bytes>{Packet(9)});
}

TEST_F(AwaitAckTest, AckAfterPacketsInOneDatagram) {
  Send(Join({Packet(), Packet(), Ack(2, 0)}));
  auto r = AwaitAck(jailer_side_.get(), 2, 1s);
  EXPECT_TRUE(r.has_value()) << r.error();
}

TEST_F(AwaitAckTest, OtherMessagesAndOtherAcksAreSkipped) {
  Send(Message(NLMSG_NOOP, 1, {}));
  Send(Message(NLMSG_DONE, 1, {0, 0, 0, 0}));
  Send(Message(NLMSG_OVERRUN, 1, {}));
  Send(Ack(7, -EPERM));  // an answer to another request
  Send(Ack(1, 0));
  auto r = AwaitAck(jailer_side_.get(), 1, 1s);
  EXPECT_TRUE(r.has_value()) << r.error();
}

TEST_F(AwaitAckTest, ErrorInTheAckIsTheError) {
  Send(Packet());
  Send(Ack(1, -EPERM));
  auto r = AwaitAck(jailer_side_.get(), 1, 1s);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find(std::strerror(EPERM)), std::string::npos) << r.error();
}

TEST_F(AwaitAckTest, MalformedHeadersEndTheirDatagramOnly) {
  // Too short to be an acknowledgement.
  Send(Message(NLMSG_ERROR, 1, {0, 0}));
  // A length past the datagram's end hides the acknowledgement behind it.
  Bytes lying = Packet();
  uint32_t huge = 1u << 20;
  std::memcpy(lying.data(), &huge, sizeof huge);
  Send(Join({lying, Ack(1, -EPERM)}));
  // A zero length would never advance.
  Bytes zero = Packet();
  std::memset(zero.data(), 0, 4);
  Send(Join({zero, Ack(1, -EPERM)}));
  // Bytes that are not even a header.
  Send(Bytes{1, 2, 3});
  Send(Ack(1, 0));
  auto r = AwaitAck(jailer_side_.get(), 1, 1s);
  EXPECT_TRUE(r.has_value()) << r.error();
}

TEST_F(AwaitAckTest, DatagramLargerThanTheBufferIsSkipped) {
  Bytes big;
  while (big.size() < 64 * 1024) {
    auto p = Packet();
    big.insert(big.end(), p.begin(), p.end());
  }
  Send(big);
  Send(Ack(1, 0));
  auto r = AwaitAck(jailer_side_.get(), 1, 1s);
  EXPECT_TRUE(r.has_value()) << r.error();
}

TEST_F(AwaitAckTest, NoAckBeforeTheTimeout) {
  Send(Packet());
  Send(Ack(2, 0));
  auto start = std::chrono::steady_clock::now();
  auto r = AwaitAck(jailer_side_.get(), 1, 200ms);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().find("no acknowledgement"), std::string::npos) << r.error();
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 5s);
}

TEST_F(AwaitAckTest, ClosedSocketEndsTheWait) {
  kernel_side_ = UniqueFd();
  auto start = std::chrono::steady_clock::now();
  auto r = AwaitAck(jailer_side_.get(), 1, 5s);
  ASSERT_FALSE(r.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1s) << r.error();
}

TEST(NflogBindTest, BindMessagesLayout) {
  auto messages = BindMessages(kGroup, kCopyRange);
  ASSERT_EQ(messages.size(), 2u);
  const uint16_t flags = NLM_F_REQUEST | NLM_F_ACK;

  Bytes bind;
  AppendHost(bind, nlmsghdr{28, kConfigType, flags, 1, 0});
  bind.insert(bind.end(), {AF_UNSPEC, NFNETLINK_V0, 0x00, 0x07});
  AppendHost(bind, nlattr{5, NFULA_CFG_CMD});
  bind.insert(bind.end(), {NFULNL_CFG_CMD_BIND, 0, 0, 0});
  EXPECT_EQ(messages[0], bind);

  Bytes mode;
  AppendHost(mode, nlmsghdr{32, kConfigType, flags, 2, 0});
  mode.insert(mode.end(), {AF_UNSPEC, NFNETLINK_V0, 0x00, 0x07});
  AppendHost(mode, nlattr{10, NFULA_CFG_MODE});
  mode.insert(mode.end(), {0x00, 0x00, 0x00, 0x80, NFULNL_COPY_PACKET, 0, 0, 0});
  EXPECT_EQ(messages[1], mode);

  // Group and copy range are in network byte order.
  auto other = BindMessages(0x0102, 0x01020304)[1];
  EXPECT_EQ(Bytes(other.begin() + 18, other.begin() + 20), (Bytes{1, 2}));
  EXPECT_EQ(Bytes(other.begin() + 24, other.begin() + 28), (Bytes{1, 2, 3, 4}));
}

}  // namespace
}  // namespace deskbox::vmhost::nflog
