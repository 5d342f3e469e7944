#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vmhost/fd_passing.h"

namespace deskbox::vmhost {
namespace {

TEST(FdPassing, SendsBytesAndDescriptors) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  UniqueFd pr(p[0]), pw(p[1]);
  int fds[] = {pw.get()};
  ASSERT_TRUE(SendDatagram(a.get(), "hello", fds));
  auto d = RecvDatagram(b.get());
  ASSERT_TRUE(d);
  EXPECT_EQ(d->bytes, "hello");
  ASSERT_EQ(d->fds.size(), 1u);
  EXPECT_EQ(::fcntl(d->fds[0].get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  ASSERT_EQ(::write(d->fds[0].get(), "x", 1), 1);  // the passed fd is the pipe's write end
  char c;
  ASSERT_EQ(::read(pr.get(), &c, 1), 1);
  EXPECT_EQ(c, 'x');
}

TEST(FdPassing, OversizedDatagramIsRefused) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  std::string big(100, 'x');
  ASSERT_EQ(::send(a.get(), big.data(), big.size(), 0), 100);
  auto d = RecvDatagram(b.get(), 10);
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error(), EMSGSIZE);
}

TEST(FdPassing, PeerCloseIsReported) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  UniqueFd a(sv[0]), b(sv[1]);
  a.reset();
  auto d = RecvDatagram(b.get());
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error(), ECONNRESET);
}

}  // namespace
}  // namespace deskbox::vmhost
