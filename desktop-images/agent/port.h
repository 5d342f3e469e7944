// The virtio-serial port and the I/O loop around it.
//
// Guest side semantics of a virtio_console port (drivers/char/virtio_console.c): while no host
// process has the chardev open, read() returns 0 and poll() reports POLLHUP at once, forever;
// writes would block (EAGAIN here, the fd is non-blocking). When the host connects (or
// disconnects), the driver sends SIGIO to the fd's owner if O_ASYNC is set. So the loop polls
// the port only while the host is connected, and otherwise sleeps on a signalfd (SIGIO) with a
// 1 s fallback: an idle guest stays idle. The host reconnects on every snapshot restore.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "agent.pb.h"
#include "agent/service.h"
#include "agent/unique_fd.h"
#include "desktop_images/agent_frame.h"

namespace deskbox::agent {

inline constexpr std::string_view kAgentPortName = "org.deskbox.agent";

// Scans <sysfs_dir>/*/name for `port_name`; returns <dev_dir>/<entry> (e.g. /dev/vport0p1).
std::optional<std::string> FindAgentPort(const std::string& sysfs_dir, const std::string& dev_dir,
                                         std::string_view port_name);

struct PortOptions {
  std::string port_name{kAgentPortName};
  std::string sysfs_dir = "/sys/class/virtio-ports";
  std::string dev_dir = "/dev";
  std::string device;     // if set, open this path instead of looking the port up
  bool use_sigio = true;  // F_SETOWN + O_ASYNC: the driver signals host (dis)connects
};

// Opens the port (non-blocking, close-on-exec). Injectable so tests can use a socketpair.
using PortOpener = std::function<std::expected<UniqueFd, std::string>()>;
PortOpener VirtioPortOpener(PortOptions options);

// Serialises whole frames onto the port: one frame at a time, under a mutex, handling partial
// writes, EINTR and EAGAIN. Each write is tagged with the connection epoch its request came
// from; a response for an earlier connection (before a disconnect, reconnect or reopen) is
// dropped rather than sent to a host that never asked for it.
class PortWriter {
 public:
  explicit PortWriter(size_t max_frame_bytes = desktop_images::kMaxFrameBytes)
      : max_frame_bytes_(max_frame_bytes) {}

  // True when the whole frame was written.
  bool Write(const pb::Response& response, uint64_t epoch);
  void Attach(int fd);
  void Detach();  // waits for a write in progress to give up
  uint64_t epoch() const { return epoch_.load(); }
  uint64_t NewEpoch() { return epoch_.fetch_add(1) + 1; }
  // A write failed mid-frame with the host still there: the stream is corrupt; reopen.
  bool TakeBroken() { return broken_.exchange(false); }

 private:
  const size_t max_frame_bytes_;
  std::mutex mu_;
  int fd_ = -1;  // guarded by mu_; owned by the PortLoop
  std::atomic<uint64_t> epoch_{1};
  std::atomic<bool> broken_{false};
};

struct PortLoopOptions {
  std::chrono::milliseconds wakeup{1000};  // fallback wakeup: housekeeping, missed SIGIO
  // After closing the port on a protocol error, keep it closed this long: the host sees the
  // port close (QMP VSERPORT_CHANGE) and can reset its end before we take bytes again.
  std::chrono::milliseconds reopen_delay{1000};
  size_t max_frame_bytes = desktop_images::kMaxFrameBytes;
};

class PortLoop {
 public:
  PortLoop(AgentService& service, PortOpener opener, PortLoopOptions options = {});
  // Runs until Stop(), or SIGTERM/SIGINT read from `signal_fd` (a signalfd, or -1). SIGIO on
  // it wakes the loop to look at the connection state.
  void Run(int signal_fd);
  void Stop();  // thread-safe

  // Counters, for tests and logs.
  uint64_t frames_received() const { return frames_received_.load(); }
  uint64_t reopens() const { return reopens_.load(); }
  bool connected() const { return connected_.load(); }

 private:
  void OpenPort();
  void ReadAvailable();
  bool FeedBytes(std::span<const uint8_t> bytes);  // false: the channel was reopened
  void OnConnected();
  void OnDisconnected();
  void Reopen(std::string_view reason);

  AgentService& service_;
  PortOpener opener_;
  const PortLoopOptions options_;
  std::shared_ptr<PortWriter> writer_;  // shared with in-flight replies
  desktop_images::FrameReader reader_;
  UniqueFd port_;
  UniqueFd stop_fd_;  // eventfd
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> frames_received_{0};
  std::atomic<uint64_t> reopens_{0};
  uint64_t open_failures_ = 0;
  std::chrono::steady_clock::time_point reopen_not_before_{};
};

}  // namespace deskbox::agent
