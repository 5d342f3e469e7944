#include "agent/port.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "agent/log.h"

namespace deskbox::agent {

namespace di = ::deskbox::desktop_images;

std::optional<std::string> FindAgentPort(const std::string& sysfs_dir, const std::string& dev_dir,
                                         std::string_view port_name) {
  DIR* dir = ::opendir(sysfs_dir.c_str());
  if (dir == nullptr) return std::nullopt;
  std::optional<std::string> found;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (name.empty() || name.front() == '.') continue;
    const std::string name_file = sysfs_dir + "/" + std::string(name) + "/name";
    UniqueFd fd(::open(name_file.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) continue;
    char buf[256];
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n <= 0) continue;
    std::string_view value(buf, static_cast<size_t>(n));
    while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.remove_suffix(1);
    if (value == port_name) {
      found = dev_dir + "/" + std::string(name);
      break;
    }
  }
  ::closedir(dir);
  return found;
}

PortOpener VirtioPortOpener(PortOptions options) {
  return [options = std::move(options)]() -> std::expected<UniqueFd, std::string> {
    std::string path = options.device;
    if (path.empty()) {
      auto found = FindAgentPort(options.sysfs_dir, options.dev_dir, options.port_name);
      if (!found) {
        return std::unexpected("no virtio port named " + options.port_name + " in " +
                               options.sysfs_dir);
      }
      path = std::move(*found);
    }
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (!fd) return std::unexpected("open " + path + ": " + std::strerror(errno));
    if (options.use_sigio) {
      const int flags = ::fcntl(fd.get(), F_GETFL);
      if (::fcntl(fd.get(), F_SETOWN, ::getpid()) != 0 || flags < 0 ||
          ::fcntl(fd.get(), F_SETFL, flags | O_ASYNC) != 0) {
        // Not fatal: the 1 s fallback wakeup still notices a host connection.
        Log("port ", path, ": cannot enable SIGIO: ", std::strerror(errno));
      }
    }
    Log("opened ", path);
    return fd;
  };
}

bool PortWriter::Write(const pb::Response& response, uint64_t epoch) {
  auto frame = di::EncodeFrame(response, max_frame_bytes_);
  if (!frame) {
    Log("response id=", response.id(), ": cannot frame it (", di::FrameErrorName(frame.error()),
        "), sending an error instead");
    frame = di::EncodeFrame(
        ErrorResponse(response.id(), MakeError(pb::Error::INTERNAL, "response too large to send")),
        max_frame_bytes_);
    if (!frame) return false;
  }
  std::lock_guard lock(mu_);
  if (fd_ < 0 || epoch != epoch_.load()) return false;
  size_t offset = 0;
  while (offset < frame->size()) {
    const ssize_t n = ::write(fd_, frame->data() + offset, frame->size() - offset);
    if (n > 0) {
      offset += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (epoch != epoch_.load()) break;  // the connection was replaced meanwhile
      pollfd p{fd_, POLLOUT, 0};
      // Short timeout so a Detach() (reconnect, reopen) never waits long for this mutex.
      const int r = ::poll(&p, 1, 200);
      if (r > 0 && !(p.revents & POLLOUT) && (p.revents & (POLLHUP | POLLERR | POLLNVAL))) {
        break;  // the host went away; its next connection starts on a frame boundary
      }
      continue;
    }
    Log("port write failed: ", n < 0 ? std::strerror(errno) : "wrote nothing");
    if (offset > 0) broken_ = true;
    return false;
  }
  if (offset == frame->size()) return true;
  if (offset > 0) Log("response id=", response.id(), ": connection lost mid-frame");
  return false;
}

void PortWriter::Attach(int fd) {
  std::lock_guard lock(mu_);
  fd_ = fd;
  broken_ = false;
}

void PortWriter::Detach() {
  NewEpoch();  // makes a writer stuck on EAGAIN give up
  std::lock_guard lock(mu_);
  fd_ = -1;
}

PortLoop::PortLoop(AgentService& service, PortOpener opener, PortLoopOptions options)
    : service_(service),
      opener_(std::move(opener)),
      options_(options),
      writer_(std::make_shared<PortWriter>(options.max_frame_bytes)),
      reader_(options.max_frame_bytes),
      stop_fd_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}

void PortLoop::Stop() {
  const uint64_t one = 1;
  if (::write(stop_fd_.get(), &one, sizeof one) < 0) {
    // The counter cannot overflow from Stop() calls; nothing to do.
  }
}

void PortLoop::OpenPort() {
  auto fd = opener_();
  if (!fd) {
    // First failure, then once a minute: the port may take a moment to appear after boot.
    if (open_failures_++ % 60 == 0) Log("waiting for the agent port: ", fd.error());
    return;
  }
  open_failures_ = 0;
  port_ = std::move(*fd);
  writer_->Attach(port_.get());
  connected_ = false;
  reader_.Reset();
}

void PortLoop::OnConnected() {
  connected_ = true;
  writer_->NewEpoch();
  reader_.Reset();
  Log("host connected");
}

void PortLoop::OnDisconnected() {
  connected_ = false;
  writer_->NewEpoch();
  if (reader_.mid_frame()) Log("dropping a partial frame of ", reader_.buffered_bytes(), " bytes");
  reader_.Reset();
  service_.OnDisconnect();
  Log("host disconnected");
}

void PortLoop::Reopen(std::string_view reason) {
  Log("closing the channel: ", reason);
  ++reopens_;
  reopen_not_before_ = std::chrono::steady_clock::now() + options_.reopen_delay;
  writer_->Detach();
  port_.reset();  // the driver discards what the host had queued for us
  connected_ = false;
  reader_.Reset();
  service_.OnDisconnect();
}

bool PortLoop::FeedBytes(std::span<const uint8_t> bytes) {
  while (!bytes.empty()) {
    const size_t taken = reader_.Feed(bytes);
    bytes = bytes.subspan(taken);
    auto next = reader_.Next();
    if (!next) {
      Reopen("protocol error: " + std::string(di::FrameErrorName(next.error())));
      return false;
    }
    if (!*next) {
      if (taken == 0) {  // cannot happen by FrameReader's contract; never spin on it
        Reopen("frame reader made no progress");
        return false;
      }
      continue;
    }
    auto request = di::ParseRequest(**next);
    if (!request) {
      Reopen("protocol error: a request frame does not parse");
      return false;
    }
    ++frames_received_;
    const uint64_t epoch = writer_->epoch();
    std::shared_ptr<PortWriter> writer = writer_;
    service_.Handle(*request, [writer, epoch](pb::Response response) {
      return writer->Write(response, epoch);
    });
  }
  return true;
}

void PortLoop::ReadAvailable() {
  uint8_t buf[64 * 1024];
  // Bounded work per wakeup; poll() brings us back if there is more.
  for (int i = 0; i < 64 && port_; ++i) {
    const ssize_t n = ::read(port_.get(), buf, sizeof buf);
    if (n > 0) {
      if (!connected_) OnConnected();
      if (!FeedBytes({buf, static_cast<size_t>(n)})) return;
      continue;
    }
    if (n == 0) {  // virtio_console: no host on the other end
      if (connected_) OnDisconnected();
      return;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {  // host there, nothing to read
      if (!connected_) OnConnected();
      return;
    }
    Reopen(std::string("read: ") + std::strerror(errno));  // ENODEV: port unplugged
    return;
  }
}

void PortLoop::Run(int signal_fd) {
  for (;;) {
    if (!port_ && std::chrono::steady_clock::now() >= reopen_not_before_) {
      OpenPort();
      if (port_) ReadAvailable();  // learn the connection state now
    }
    pollfd fds[3];
    nfds_t n = 0;
    fds[n++] = {stop_fd_.get(), POLLIN, 0};
    const int signal_idx = signal_fd >= 0 ? static_cast<int>(n) : -1;
    if (signal_fd >= 0) fds[n++] = {signal_fd, POLLIN, 0};
    // Only while the host is connected: otherwise the port polls ready (POLLHUP) forever.
    const int port_idx = port_ && connected_ ? static_cast<int>(n) : -1;
    if (port_idx >= 0) fds[n++] = {port_.get(), POLLIN, 0};
    auto wait = options_.wakeup;
    const auto until_reopen = std::chrono::ceil<std::chrono::milliseconds>(
        reopen_not_before_ - std::chrono::steady_clock::now());
    if (!port_ && until_reopen.count() > 0) {  // closed after a protocol error
      wait = std::min(until_reopen, options_.wakeup);
    }
    const int r = ::poll(fds, n, static_cast<int>(wait.count()));
    if (r < 0 && errno != EINTR) {
      Log("poll: ", std::strerror(errno));
      ::usleep(100'000);
      continue;
    }
    if (fds[0].revents & POLLIN) {
      Log("stopping");
      break;
    }
    if (signal_idx >= 0 && (fds[signal_idx].revents & POLLIN)) {
      bool terminate = false;
      signalfd_siginfo info;
      while (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) terminate = true;
      }
      if (terminate) {
        Log("terminating on signal");
        break;
      }
    }
    service_.Tick();
    if (writer_->TakeBroken()) Reopen("a response was cut off by a write error");
    if (!port_) continue;
    // Disconnected: every wakeup (SIGIO or the fallback) re-reads the state with one read().
    if (!connected_ || (port_idx >= 0 && fds[port_idx].revents != 0)) ReadAvailable();
  }
  writer_->Detach();
  port_.reset();
  service_.OnDisconnect();
}

}  // namespace deskbox::agent
