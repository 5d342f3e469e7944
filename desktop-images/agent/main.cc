// deskbox-agent: the guest agent. Started as root by the guest's PID 1 with stderr on the
// console; see README.md for what it does and its options.
#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "agent/clock.h"
#include "agent/desktop_probe.h"
#include "agent/log.h"
#include "agent/port.h"
#include "agent/process.h"
#include "agent/service.h"
#include "agent/system_control.h"
#include "agent/task_runner.h"

namespace {

using namespace deskbox::agent;

constexpr size_t kMaxConcurrentTasks = 16;
// Where --exec-disk-mib keeps root's quota base (tmpfs: part of the guest's memory, so a
// restored or restarted agent finds the template's).
constexpr const char* kDiskBaseFile = "/run/deskbox/exec-disk-base";

void Usage() {
  std::fprintf(stderr,
               "usage: deskbox-agent [--port-name=NAME] [--device=PATH] [--sysfs-dir=DIR] "
               "[--dev-dir=DIR] [--exec-cgroup=DIR] [--exec-disk-mib=N]\n"
               "  --port-name  virtio-serial port name (default org.deskbox.agent)\n"
               "  --device     open PATH instead of looking the port up\n"
               "  --sysfs-dir  where to look (default /sys/class/virtio-ports)\n"
               "  --dev-dir    where the port devices are (default /dev)\n"
               "  --exec-cgroup  cgroup v2 directory exec commands join before they start\n"
               "               (through /usr/lib/deskbox/exec-in; default: none)\n"
               "  --exec-disk-mib  how much root's files on / may grow past what they took up\n"
               "               at the agent's first start (a user quota; default: no limit).\n"
               "               Children of the agent lose CAP_SYS_RESOURCE, which overrides it\n");
}

bool TakeValue(std::string_view arg, std::string_view flag, std::string& out) {
  if (!arg.starts_with(flag) || arg.size() <= flag.size() || arg[flag.size()] != '=') return false;
  out = std::string(arg.substr(flag.size() + 1));
  return true;
}

// Children get 0/1/2 from pipes via dup2; make sure those numbers are never free, so a new
// descriptor is never one of them.
void EnsureStandardFds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      const int null_fd = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (null_fd >= 0 && null_fd != fd) {
        ::dup2(null_fd, fd);
        ::close(null_fd);
      }
    }
  }
}

// protobuf's own diagnostics (e.g. "invalid UTF-8 when parsing") in our one-line format.
void ProtobufLog(google::protobuf::LogLevel, const char*, int, const std::string& message) {
  Log("protobuf: ", message);
}

}  // namespace

int main(int argc, char** argv) {
  PortOptions port_options;
  std::string exec_cgroup, exec_disk_mib;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (TakeValue(arg, "--port-name", port_options.port_name) ||
        TakeValue(arg, "--device", port_options.device) ||
        TakeValue(arg, "--sysfs-dir", port_options.sysfs_dir) ||
        TakeValue(arg, "--dev-dir", port_options.dev_dir) || TakeValue(arg, "--exec-cgroup", exec_cgroup) ||
        TakeValue(arg, "--exec-disk-mib", exec_disk_mib)) {
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    }
    std::fprintf(stderr, "deskbox-agent: unknown argument: %s\n", argv[i]);
    Usage();
    return 2;
  }

  uint64_t disk_mib = 0;
  if (!exec_disk_mib.empty()) {
    const char* end = exec_disk_mib.data() + exec_disk_mib.size();
    const auto [p, ec] = std::from_chars(exec_disk_mib.data(), end, disk_mib);
    if (ec != std::errc{} || p != end || disk_mib == 0 || disk_mib > (uint64_t{1} << 30)) {
      std::fprintf(stderr, "deskbox-agent: --exec-disk-mib: a number of MiB, 1 or more\n");
      return 2;
    }
  }

  EnsureStandardFds();
  google::protobuf::SetLogHandler(&ProtobufLog);
  // Before any thread exists, so every thread inherits the mask: SIGIO (host connect),
  // SIGTERM and SIGINT are only ever read from the signalfd in the I/O loop.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGIO);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGINT);
  pthread_sigmask(SIG_BLOCK, &handled, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // EPIPE from a child's closed stdin is handled
  ::signal(SIGHUP, SIG_IGN);   // console hangups
  const int signal_fd = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) Log("signalfd: ", std::strerror(errno), " (falling back to 1 s polling)");

  SystemClock clock;
  LinuxSystemControl system;
  SpawnProcessRunner processes;
  LinuxDesktopProbe desktop(processes);
  ThreadTaskRunner tasks(kMaxConcurrentTasks);
  AgentLimits limits;
  limits.exec.cgroup = exec_cgroup;
  if (disk_mib != 0) {
    // Root ignores quota hard limits with CAP_SYS_RESOURCE: no program the agent starts (exec
    // commands above all) gets it; the agent keeps it for its own file writes.
    if (::prctl(PR_CAPBSET_DROP, CAP_SYS_RESOURCE, 0, 0, 0) != 0)
      Log("dropping CAP_SYS_RESOURCE from the bounding set: ", std::strerror(errno));
    limits.exec.disk_base_file = kDiskBaseFile;
    // Only at the first start: a restarted agent leaves a limit deskboxd may have changed.
    if (::access(kDiskBaseFile, F_OK) != 0) {
      if (auto set = system.LimitDiskGrowth(0, disk_mib << 20, kDiskBaseFile); !set)
        Log("exec disk limit: ", set.error().message);
      else
        Log("exec disk limit: ", disk_mib, " MiB above root's files now");
    }
  }
  AgentService service(AgentDeps{clock, system, processes, desktop, tasks}, limits);
  PortLoop loop(service, VirtioPortOpener(port_options));

  Log("starting: protocol ", kProtocolVersion, ", port ",
      port_options.device.empty() ? port_options.port_name : port_options.device, ", pid ",
      ::getpid());
  loop.Run(signal_fd);
  // Unfinished file writes were discarded by the loop. Do not wait for running commands (an
  // Exec may run for an hour): leave now.
  Log("exiting");
  std::_Exit(0);
}
