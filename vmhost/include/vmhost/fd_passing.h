#pragma once
// One datagram with file descriptors over a SOCK_SEQPACKET unix socket (SCM_RIGHTS).
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/unique_fd.h"

namespace deskbox::vmhost {

struct Datagram {
  std::string bytes;
  std::vector<UniqueFd> fds;
};

inline constexpr size_t kMaxDatagramBytes = 64 * 1024;
inline constexpr size_t kMaxDatagramFds = 8;

// Sends all of bytes in one datagram with fds attached. Returns errno on failure.
std::expected<void, int> SendDatagram(int sock, std::string_view bytes, std::span<const int> fds);
// Receives one datagram. Errors: EAGAIN (non-blocking, nothing there), ECONNRESET (peer closed),
// EMSGSIZE (datagram or fd count over the limits: it is dropped, fds closed).
std::expected<Datagram, int> RecvDatagram(int sock, size_t max_bytes = kMaxDatagramBytes,
                                          size_t max_fds = kMaxDatagramFds);

}  // namespace deskbox::vmhost
