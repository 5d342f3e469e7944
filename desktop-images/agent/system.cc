// The real Clock and SystemControl.
#include <fcntl.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include <sys/utsname.h>
#include <time.h>

#include <cerrno>
#include <cstring>
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

std::string LinuxSystemControl::KernelRelease() {
  utsname u{};
  if (::uname(&u) != 0) return "";
  return u.release;
}

}  // namespace deskbox::agent
