#pragma once
// What the jailer's request handlers share (jailer_server.cc, jailer_launch.cc): replies,
// running tools, directories, sockets and namespaces as root.
#include <fcntl.h>
#include <sched.h>
#include <sys/types.h>

#include <cerrno>
#include <cstdlib>
#include <expected>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "vmhost/jailer_server.h"

namespace deskbox::vmhost::jailer_util {

JailerServer::Reply Fail(int code, std::string message);
JailerServer::Reply Ok();

// Runs fn with the calling thread inside the network namespace at ns_path.
template <typename Fn>
auto InNetns(const std::string& ns_path, Fn fn) -> std::expected<decltype(fn()), int> {
  UniqueFd orig(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  UniqueFd target(::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!orig || !target) return std::unexpected(errno);
  if (::setns(target.get(), CLONE_NEWNET) != 0) return std::unexpected(errno);
  auto result = fn();
  if (::setns(orig.get(), CLONE_NEWNET) != 0) std::abort();  // cannot continue in a slot's netns
  return result;
}

// Runs a host tool (ip, nft, qemu-img, cp) to completion within 20 s; its output on failure.
std::expected<void, std::string> RunTool(const std::vector<std::string>& argv,
                                         const std::string& input = {});
// mkdir (an existing directory is fine), then chown and chmod.
std::expected<void, std::string> MkdirOwned(const std::string& path, uid_t uid, gid_t gid,
                                            mode_t mode);
bool ProcessAlive(pid_t pid);
// A connected unix stream socket, or an invalid fd with errno set.
UniqueFd ConnectUnix(const std::string& path);
// The last `bytes` of a file (QEMU's log), without trailing newlines; empty if unreadable.
std::string TailOf(const std::string& path, size_t bytes);

}  // namespace deskbox::vmhost::jailer_util
