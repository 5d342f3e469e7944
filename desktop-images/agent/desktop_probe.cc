#include "agent/desktop_probe.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "agent/text.h"
#include "agent/unique_fd.h"

namespace deskbox::agent {

bool LinuxDesktopProbe::XServerAnswers() {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (options_.x_socket.size() >= sizeof addr.sun_path) return false;
  std::memcpy(addr.sun_path, options_.x_socket.data(), options_.x_socket.size());
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd) return false;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0) return true;
  // EAGAIN: a listener exists but its backlog is full; the server is up.
  return errno == EAGAIN;
}

std::expected<HttpResponse, std::string> LinuxDesktopProbe::DevToolsGet(std::string_view path) {
  return HttpGet(options_.devtools_address, options_.devtools_port, path);
}

std::expected<std::string, std::string> LinuxDesktopProbe::ReadProcStat() {
  UniqueFd fd(::open(options_.proc_stat.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::unexpected(std::string("open /proc/stat: ") + std::strerror(errno));
  // Only the first line is needed; one read of a page holds it.
  std::string buf(4096, '\0');
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::unexpected(std::string("read /proc/stat: ") + std::strerror(errno));
    buf.resize(static_cast<size_t>(n));
    return buf;
  }
}

std::expected<std::string, std::string> LinuxDesktopProbe::Xwininfo(
    const std::vector<std::string>& args) {
  ExecSpec spec;
  spec.argv.push_back("xwininfo");
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "DISPLAY=" + options_.display, "LANG=C.UTF-8"};
  spec.timeout = std::chrono::seconds(3);
  spec.max_output_bytes = 1u << 20;
  spec.drain_after_exit = std::chrono::milliseconds(100);
  auto outcome = runner_.Run(spec);
  if (!outcome) return std::unexpected(outcome.error().message);
  if (outcome->timed_out) return std::unexpected("xwininfo timed out");
  if (outcome->exit_code != 0) {
    return std::unexpected("xwininfo exited " + std::to_string(outcome->exit_code) + ": " +
                           Abbreviate(outcome->stderr_data, 200));
  }
  return std::move(outcome->stdout_data);
}

}  // namespace deskbox::agent
