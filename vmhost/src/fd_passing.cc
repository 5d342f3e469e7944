#include "vmhost/fd_passing.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace deskbox::vmhost {

std::expected<void, int> SendDatagram(int sock, std::string_view bytes, std::span<const int> fds) {
  if (fds.size() > kMaxDatagramFds || bytes.size() > kMaxDatagramBytes)
    return std::unexpected(EMSGSIZE);
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDatagramFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n >= 0) return {};
    if (errno != EINTR) return std::unexpected(errno);
  }
}

std::expected<Datagram, int> RecvDatagram(int sock, size_t max_bytes, size_t max_fds) {
  Datagram d;
  d.bytes.resize(max_bytes + 1);
  iovec iov{d.bytes.data(), d.bytes.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxDatagramFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return std::unexpected(errno);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        d.fds.emplace_back(fd);
      }
    }
  }
  if (n == 0 && d.fds.empty()) return std::unexpected(ECONNRESET);
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || static_cast<size_t>(n) > max_bytes ||
      d.fds.size() > max_fds)
    return std::unexpected(EMSGSIZE);  // d.fds close here
  d.bytes.resize(static_cast<size_t>(n));
  return d;
}

}  // namespace deskbox::vmhost
