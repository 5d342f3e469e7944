#pragma once
// The jailer's side of the NFLOG socket (the refused-packet log of a slot): it binds the socket
// to the slot ruleset's log group, which needs CAP_NET_ADMIN in the netns, and hands it to
// deskboxd, which reads and parses the packets (egress/nflog.h). The jailer runs as root, so it
// parses none of them: while it waits for the kernel's acknowledgements it looks only at netlink
// message headers and skips every message that is not an acknowledgement, packets included
// (the log group may deliver some as soon as the bind is made).
#include <chrono>
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

namespace deskbox::vmhost::nflog {

inline constexpr uint16_t kGroup = 7;        // the nft `log group` of the slot ruleset
inline constexpr uint32_t kCopyRange = 128;  // bytes of each packet copied: IP + L4 headers

// The netlink messages that make an NFLOG socket receive group `group` with `copy_range` bytes
// of each packet: NFULNL_CFG_CMD_BIND (sequence number 1), then NFULA_CFG_MODE with
// NFULNL_COPY_PACKET (2), each asking for an acknowledgement (NLM_F_ACK).
std::vector<std::vector<uint8_t>> BindMessages(uint16_t group, uint32_t copy_range);

// Reads datagrams from `fd` until the netlink acknowledgement (NLMSG_ERROR) of sequence number
// `seq` arrives or `timeout` passes. Anything else — other messages, acknowledgements of other
// requests, malformed headers — is skipped without looking past the netlink header. An
// acknowledgement carrying an error code is the error.
std::expected<void, std::string> AwaitAck(int fd, uint32_t seq, std::chrono::milliseconds timeout);

// Sends BindMessages(group, copy_range) on `fd` (AF_NETLINK, NETLINK_NETFILTER, bound) to the
// kernel, waiting for each one's acknowledgement.
std::expected<void, std::string> BindGroup(int fd, uint16_t group, uint32_t copy_range,
                                           std::chrono::milliseconds timeout_each);

}  // namespace deskbox::vmhost::nflog
