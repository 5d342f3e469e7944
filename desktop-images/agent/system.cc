// The real Clock and SystemControl.
#include <fcntl.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <sys/quota.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agent/clock.h"
#include "agent/system_control.h"
#include "agent/unique_fd.h"

namespace deskbox::agent {
namespace {

int64_t Now(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

#ifndef SYS_quotactl_fd
#define SYS_quotactl_fd 443  // Linux 5.14, the same number on every architecture
#endif

// quotactl on the filesystem of an open descriptor: no block device name needed.
int QuotactlFd(int fd, int cmd, uint32_t id, dqblk* q) {
  return static_cast<int>(::syscall(SYS_quotactl_fd, fd, QCMD(cmd, USRQUOTA), id, q));
}

// The number kept in `path` (decimal, what WriteBase wrote), if any.
std::optional<uint64_t> ReadBase(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::nullopt;
  char buf[32];
  const ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(buf, buf + n, v);
  if (ec != std::errc{} || end == buf) return std::nullopt;
  return v;
}

}  // namespace

int64_t SystemClock::MonotonicNs() { return Now(CLOCK_MONOTONIC); }
int64_t SystemClock::RealtimeNs() { return Now(CLOCK_REALTIME); }
void SystemClock::SleepFor(std::chrono::milliseconds duration) {
  std::this_thread::sleep_for(duration);
}

std::expected<void, AgentError> LinuxSystemControl::SetRealtime(int64_t unix_time_ns) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(unix_time_ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(unix_time_ns % 1'000'000'000);
  if (clock_settime(CLOCK_REALTIME, &ts) != 0) {
    return std::unexpected(ErrnoError(errno, "clock_settime"));
  }
  return {};
}

std::expected<void, AgentError> LinuxSystemControl::AddEntropyAndReseed(
    std::span<const uint8_t> bytes) {
  UniqueFd fd(::open("/dev/random", O_WRONLY | O_CLOEXEC));
  if (!fd) return std::unexpected(ErrnoError(errno, "open /dev/random"));
  // struct rand_pool_info ends in a flexible array: allocate header + payload.
  std::vector<uint8_t> storage(sizeof(rand_pool_info) + bytes.size());
  struct Wipe {  // our copy of the seed material does not outlive the call
    std::vector<uint8_t>& v;
    ~Wipe() { explicit_bzero(v.data(), v.size()); }
  } wipe{storage};
  auto* info = reinterpret_cast<rand_pool_info*>(storage.data());
  info->entropy_count = static_cast<int>(bytes.size() * 8);  // full credit
  info->buf_size = static_cast<int>(bytes.size());
  std::memcpy(storage.data() + sizeof(rand_pool_info), bytes.data(), bytes.size());
  if (::ioctl(fd.get(), RNDADDENTROPY, info) != 0) {
    return std::unexpected(ErrnoError(errno, "ioctl RNDADDENTROPY"));
  }
  if (::ioctl(fd.get(), RNDRESEEDCRNG) != 0) {
    return std::unexpected(ErrnoError(errno, "ioctl RNDRESEEDCRNG"));
  }
  return {};
}

std::expected<void, AgentError> LinuxSystemControl::LimitDiskGrowth(uint32_t uid, uint64_t bytes,
                                                                    const std::string& base_file) {
  UniqueFd root(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!root) return std::unexpected(ErrnoError(errno, "open /"));
  dqblk q{};
  if (QuotactlFd(root.get(), Q_GETQUOTA, uid, &q) != 0) {
    const int err = errno;
    if (err == ESRCH || err == ENOSYS || err == EINVAL)
      return std::unexpected(MakeError(pb::Error::UNSUPPORTED,
                                       "the root filesystem keeps no user quota: " + std::string(std::strerror(err))));
    return std::unexpected(ErrnoError(err, "quotactl Q_GETQUOTA"));
  }
  // The base: what the user's files took up when the first limit was set (the template's files,
  // for root), so that the limit counts only what commands add.
  uint64_t base = 0;
  if (auto kept = ReadBase(base_file)) {
    base = *kept;
  } else {
    base = q.dqb_curspace;
    const std::string text = std::to_string(base) + "\n";
    const std::string tmp = base_file + ".tmp";
    UniqueFd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    if (!out) return std::unexpected(ErrnoError(errno, "open " + tmp));
    if (::write(out.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      return std::unexpected(ErrnoError(errno, "write " + tmp));
    out.reset();
    if (::rename(tmp.c_str(), base_file.c_str()) != 0)
      return std::unexpected(ErrnoError(errno, "rename " + base_file));
  }
  dqblk set{};
  set.dqb_bhardlimit = (base + bytes + QIF_DQBLKSIZE - 1) / QIF_DQBLKSIZE;  // 1 KiB blocks
  set.dqb_bsoftlimit = 0;
  set.dqb_valid = QIF_BLIMITS;
  if (QuotactlFd(root.get(), Q_SETQUOTA, uid, &set) != 0)
    return std::unexpected(ErrnoError(errno, "quotactl Q_SETQUOTA"));
  return {};
}

std::string LinuxSystemControl::KernelRelease() {
  utsname u{};
  if (::uname(&u) != 0) return "";
  return u.release;
}

}  // namespace deskbox::agent
