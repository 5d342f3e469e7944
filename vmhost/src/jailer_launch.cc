// JailerServer::Launch: a slot's QEMU, started jailed (its uid, netns, mount namespace, cgroup,
// no new privileges), from a template (restore) or from an image (the boot that makes one).
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/log.h"
#include "common/process.h"
#include "jailer_util.h"
#include "vmhost/jailer_server.h"
#include "vmhost/qemu_command.h"
#include "vmhost/template.h"

namespace deskbox::vmhost {

using namespace jailer_util;

namespace {

constexpr char kLaunchLog[] = "jailer";
constexpr auto kStartTimeout = std::chrono::seconds(20);

std::unexpected<JailerServer::Reply> Refuse(int code, std::string message) {
  return std::unexpected(Fail(code, std::move(message)));
}

struct Expose {
  std::string path;
  bool read_only;
};

struct ChildPlan {
  int netns_fd, tap_fd, log_fd, err_fd, null_fd;
  std::vector<std::string> hide;
  std::vector<Expose>* expose;
  std::vector<std::string> cgroup_procs;
  uid_t uid;
  std::vector<char*> argv;
  std::vector<char*> envp;
};

[[noreturn]] void ChildFail(int err_fd, const char* step) {
  int e = errno;
  char buf[160];
  int n = std::snprintf(buf, sizeof buf, "%s: %s", step, std::strerror(e));
  (void)!::write(err_fd, buf, static_cast<size_t>(n));
  ::_exit(127);
}

void MkdirAll(const std::string& path) {
  for (size_t pos = 1; pos != std::string::npos;) {
    pos = path.find('/', pos + 1);
    ::mkdir(path.substr(0, pos).c_str(), 0755);
  }
}

// Runs in the forked child (the parent is single-threaded, so allocation is safe here).
[[noreturn]] void ChildJail(ChildPlan& p) {
  if (::setns(p.netns_fd, CLONE_NEWNET) != 0) ChildFail(p.err_fd, "setns(net)");
  if (::unshare(CLONE_NEWNS) != 0) ChildFail(p.err_fd, "unshare(mount)");
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
    ChildFail(p.err_fd, "make mounts private");
  // Handles on what stays visible, taken in the new namespace before the roots are covered
  // (a bind source must belong to the caller's mount namespace).
  std::vector<int> keep;
  for (auto& e : *p.expose) {
    int fd = ::open(e.path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) ChildFail(p.err_fd, "open slot files");
    keep.push_back(fd);
  }
  for (const auto& h : p.hide) {
    if (::access(h.c_str(), F_OK) != 0) continue;  // absent or already under a hidden root
    if (::mount("tmpfs", h.c_str(), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") != 0)
      ChildFail(p.err_fd, "hide directory");
  }
  for (size_t i = 0; i < p.expose->size(); ++i) {
    const Expose& e = (*p.expose)[i];
    MkdirAll(e.path);
    std::string src = "/proc/self/fd/" + std::to_string(keep[i]);
    if (::mount(src.c_str(), e.path.c_str(), nullptr, MS_BIND, nullptr) != 0)
      ChildFail(p.err_fd, "bind slot files");
    if (e.read_only &&
        ::mount(nullptr, e.path.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV,
                nullptr) != 0)
      ChildFail(p.err_fd, "remount read-only");
  }
  for (const auto& f : p.cgroup_procs) {
    int fd = ::open(f.c_str(), O_WRONLY | O_CLOEXEC);
    std::string pid = std::to_string(::getpid());
    if (fd < 0 || ::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size()))
      ChildFail(p.err_fd, "join cgroup");
    ::close(fd);
  }
  if (::setsid() < 0) ChildFail(p.err_fd, "setsid");
  // Move the fds QEMU keeps out of the way, then into place: 0 null, 1/2 log, 3 tap.
  int tap = ::fcntl(p.tap_fd, F_DUPFD_CLOEXEC, 100);
  int log = ::fcntl(p.log_fd, F_DUPFD_CLOEXEC, 100);
  int nul = ::fcntl(p.null_fd, F_DUPFD_CLOEXEC, 100);
  if (tap < 0 || log < 0 || nul < 0) ChildFail(p.err_fd, "dup");
  if (::dup2(nul, 0) < 0 || ::dup2(log, 1) < 0 || ::dup2(log, 2) < 0 || ::dup2(tap, 3) < 0)
    ChildFail(p.err_fd, "dup2");
  ::syscall(SYS_close_range, 4u, ~0u, 4u /* CLOSE_RANGE_CLOEXEC */);
  ::fcntl(p.err_fd, F_SETFD, FD_CLOEXEC);
  if (::setgroups(0, nullptr) != 0) ChildFail(p.err_fd, "setgroups");
  if (::setresgid(p.uid, p.uid, p.uid) != 0) ChildFail(p.err_fd, "setresgid");
  if (::setresuid(p.uid, p.uid, p.uid) != 0) ChildFail(p.err_fd, "setresuid");
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(p.err_fd, "no_new_privs");
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::execve(p.argv[0], p.argv.data(), p.envp.data());
  ChildFail(p.err_fd, "exec qemu");
}

std::string FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin"}) {
    std::string p = std::string(dir) + "/" + name;
    if (::access(p.c_str(), X_OK) == 0) return p;
  }
  return name;
}

}  // namespace

// What a Launch request becomes before QEMU starts.
struct JailerServer::LaunchPlan {
  uint32_t slot = 0;
  uid_t uid = 0;
  std::string slot_dir;
  QemuSpec spec;
  std::vector<Expose> expose;  // what QEMU sees of the host's files
  std::string template_name;
};

std::expected<void, JailerServer::Reply> JailerServer::CheckLaunch(const jailer::v1::Launch& r) {
  uint32_t slot = r.slot();
  if (slot >= config_.max_slots) return Refuse(EINVAL, fmt::format("slot {} out of range", slot));
  if (slots_.count(slot) && ProcessAlive(slots_[slot].qemu_pid))
    return Refuse(EBUSY,
                  fmt::format("slot {} already runs QEMU (pid {})", slot, slots_[slot].qemu_pid));
  if (r.accelerator() != "kvm" && r.accelerator() != "tcg")
    return Refuse(EINVAL, "accelerator must be resolved to kvm or tcg");
  if (!IsValidCpuModel(r.cpu_model()))
    return Refuse(EINVAL,
                  fmt::format("bad cpu model \"{}\" (a model name, then ,+feature or ,-feature)",
                              r.cpu_model().substr(0, 64)));
  return {};
}

std::expected<void, JailerServer::Reply> JailerServer::PlanRestore(const jailer::v1::Launch& r,
                                                                   LaunchPlan& plan) {
  const uid_t uid = plan.uid;
  const std::string& slot_dir = plan.slot_dir;
  if (!IsSafeName(r.template_name())) return Refuse(EINVAL, "bad template name");
  plan.template_name = r.template_name();
  std::string tdir = config_.cache_dir + "/templates/" + plan.template_name;
  auto manifest = OpenTemplate(tdir, VerifyMode::kQuick);
  if (!manifest) return Refuse(ENOENT, manifest.error().message);
  plan.spec.smp = manifest->smp();
  plan.spec.memory_mib = manifest->memory_mib();
  if (manifest->cpu_model() != r.cpu_model())
    return Refuse(EINVAL, fmt::format("template was built with -cpu {}, not {}",
                                    manifest->cpu_model(), r.cpu_model()));
  plan.spec.ram_path = tdir + "/" + kRamFile;
  plan.spec.ram_writable_shared = false;
  plan.spec.disk_path = slot_dir + "/overlay.qcow2";
  plan.spec.disk_format = "qcow2";
  plan.spec.incoming_defer = true;
  if (auto e = RunTool({"qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b",
                    tdir + "/" + kDiskFile, plan.spec.disk_path});
      !e)
    return Refuse(EIO, e.error());
  if (::chown(plan.spec.disk_path.c_str(), uid, uid) != 0) return Refuse(errno, "chown overlay");
  plan.expose.push_back({tdir, true});
  return {};
}

std::expected<void, JailerServer::Reply> JailerServer::PlanBoot(const jailer::v1::Launch& r,
                                                                LaunchPlan& plan) {
  const uid_t uid = plan.uid;
  if (!IsSafeName(r.image_name()) || !IsSafeName(r.staging_name()))
    return Refuse(EINVAL, "bad image or staging name");
  if (r.kernel_append().size() > 512 ||
      r.kernel_append().find_first_not_of(
          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._=,: -") !=
          std::string::npos)
    return Refuse(EINVAL, "bad kernel command line addition");
  std::string idir = config_.cache_dir + "/images/" + r.image_name();
  std::string sdir = config_.cache_dir + "/templates/" + r.staging_name();
  if (::access((idir + "/DONE").c_str(), F_OK) != 0)
    return Refuse(ENOENT, fmt::format("image {} is not built", idir));
  if (::access(sdir.c_str(), F_OK) == 0)
    return Refuse(EEXIST, fmt::format("staging directory {} exists", sdir));
  if (auto e = MkdirOwned(config_.cache_dir + "/templates", 0, 0, 0755); !e) return Refuse(EIO, e.error());
  if (auto e = MkdirOwned(sdir, uid, uid, 0700); !e) return Refuse(EIO, e.error());
  plan.spec.disk_path = sdir + "/" + kDiskFile;
  plan.spec.disk_format = "raw";
  if (auto e = RunTool({"cp", "--sparse=always", idir + "/rootfs.img", plan.spec.disk_path}); !e)
    return Refuse(EIO, e.error());
  if (::chown(plan.spec.disk_path.c_str(), uid, uid) != 0 || ::chmod(plan.spec.disk_path.c_str(), 0600) != 0)
    return Refuse(errno, "chown disk");
  auto cmdline = ReadFile(idir + "/cmdline", 4096);
  if (!cmdline) return Refuse(cmdline.error(), "reading image cmdline");
  std::string append = *cmdline;
  while (!append.empty() && (append.back() == '\n' || append.back() == ' ')) append.pop_back();
  if (!r.kernel_append().empty()) append += " " + r.kernel_append();
  // Under TCG the kernel's TSC calibration against the emulated PIT failed in about one boot
  // of three (busy or idle host) and the boot then hung: give it the rate.
  if (plan.spec.accelerator == "tcg")
    if (uint32_t khz = HostTscKhz()) append += fmt::format(" tsc_early_khz={}", khz);
  plan.spec.boot = BootFiles{idir + "/vmlinuz", idir + "/initrd.img", append};
  plan.spec.smp = std::clamp<uint32_t>(r.smp() ? r.smp() : 2, 1, 16);
  plan.spec.memory_mib = std::clamp<uint64_t>(r.memory_mib() ? r.memory_mib() : 2048, 256, 65536);
  plan.spec.ram_path = sdir + "/" + kRamFile;
  plan.spec.ram_writable_shared = true;
  plan.expose.push_back({idir, true});
  plan.expose.push_back({sdir, false});
  plan.template_name = r.staging_name();
  return {};
}

// The slot's tap (the persistent tap0 CreateSlot made), opened inside its netns.
std::expected<UniqueFd, JailerServer::Reply> JailerServer::OpenTap(uint32_t slot) {
  auto tap = InNetns("/run/netns/" + NetnsName(slot), [] {
    UniqueFd fd(::open("/dev/net/tun", O_RDWR | O_CLOEXEC));
    if (!fd) return UniqueFd();
    ifreq ifr{};
    std::strncpy(ifr.ifr_name, "tap0", IFNAMSIZ - 1);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
    if (::ioctl(fd.get(), TUNSETIFF, &ifr) != 0) return UniqueFd();
    return fd;
  });
  if (!tap || !*tap)
    return Refuse(EIO, fmt::format("opening tap0 of slot {}: {}", slot, ErrnoString(errno)));
  return std::move(*tap);
}

std::expected<pid_t, JailerServer::Reply> JailerServer::StartJailed(LaunchPlan& plan, int netns_fd,
                                                                    int tap_fd, int log_fd) {
  const uint32_t slot = plan.slot;
  UniqueFd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!null_fd) return Refuse(errno, "open /dev/null");
  CgroupLimits limits;
  limits.cpus = plan.spec.smp;
  // Guest RAM, TCG's translation cache (not allocated under KVM) and QEMU's own.
  limits.memory_bytes =
      (plan.spec.memory_mib + (plan.spec.accelerator == "tcg" ? plan.spec.tb_size_mib : 0) +
       config_.memory_overhead_mib)
      << 20;
  limits.pids = config_.pids_max;
  if (auto e = cgroups_->Create(CgroupName(slot), limits); !e) return Refuse(EIO, e.error());

  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    (void)cgroups_->Remove(CgroupName(slot));
    return Refuse(errno, "pipe");
  }
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);
  std::vector<std::string> argv = BuildQemuArgv(plan.spec);
  log::Debug(kLaunchLog, "slot {}: {}", slot, JoinArgv(argv));
  std::vector<std::string> envs = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};
  ChildPlan child{netns_fd, tap_fd, log_fd, err_w.get(), null_fd.get(), {}, &plan.expose,
                  cgroups_->ProcsFiles(CgroupName(slot)), plan.uid, {}, {}};
  child.hide = {config_.cache_dir, config_.state_dir, "/tmp", "/var/tmp", "/dev/shm", "/run/netns",
                std::filesystem::path(config_.socket_path).parent_path().string()};
  std::sort(child.hide.begin(), child.hide.end(),
            [](const std::string& a, const std::string& b) { return a.size() < b.size(); });
  for (auto& a : argv) child.argv.push_back(a.data());
  child.argv.push_back(nullptr);
  for (auto& e : envs) child.envp.push_back(e.data());
  child.envp.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid < 0) {
    (void)cgroups_->Remove(CgroupName(slot));
    return Refuse(errno, "fork");
  }
  if (pid == 0) ChildJail(child);
  err_w.reset();
  // The child writes why it failed before exec; exec closes the pipe.
  char errbuf[200];
  ssize_t n = ::read(err_r.get(), errbuf, sizeof errbuf);
  if (n > 0) return std::unexpected(EndLaunch(slot, pid, std::string(errbuf, size_t(n))));
  return pid;
}

JailerServer::Reply JailerServer::EndLaunch(uint32_t slot, pid_t pid, const std::string& why) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  if (auto it = slots_.find(slot); it != slots_.end()) it->second.qemu_pid = 0;
  (void)cgroups_->Remove(CgroupName(slot));
  return Fail(EIO, fmt::format("starting QEMU in slot {}: {}", slot, why));
}

std::expected<JailerServer::QemuHandles, JailerServer::Reply> JailerServer::AwaitQemu(
    const LaunchPlan& plan, pid_t pid, const std::string& log_path) {
  const uint32_t slot = plan.slot;
  QemuHandles h;
  auto deadline = std::chrono::steady_clock::now() + kStartTimeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      slots_[slot].qemu_pid = 0;
      (void)cgroups_->Remove(CgroupName(slot));
      std::string how = WIFSIGNALED(status)
                            ? fmt::format("killed by signal {}", WTERMSIG(status))
                            : fmt::format("exit status {}", WEXITSTATUS(status));
      return Refuse(EIO, fmt::format("QEMU in slot {} exited at start ({}); its log: {}", slot, how,
                                     TailOf(log_path, 600)));
    }
    if (!h.qmp) h.qmp = ConnectUnix(plan.spec.qmp_socket);
    if (h.qmp && !h.agent) h.agent = ConnectUnix(plan.spec.agent_socket);
    if (h.qmp && h.agent) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!h.qmp || !h.agent)
    return std::unexpected(EndLaunch(
        slot, pid, "QEMU did not open its sockets within 20 s: " + TailOf(log_path, 600)));
  // Peek for QMP's greeting (deskboxd reads it): a QEMU that dies before its monitor answers is
  // reported here with its own words. (The monitor may greet before the machine is fully set
  // up; later deaths show as a closed QMP connection and in this helper's log at destroy.)
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd pfd{h.qmp.get(), POLLIN, 0};
    int ready = left.count() > 0 ? ::poll(&pfd, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    char c;
    if (ready > 0 && ::recv(h.qmp.get(), &c, 1, MSG_PEEK | MSG_DONTWAIT) == 1) break;
    ::waitpid(pid, nullptr, WNOHANG);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let QEMU finish its message
    return std::unexpected(
        EndLaunch(slot, pid,
                  ready > 0 ? "QEMU exited at start: " + TailOf(log_path, 600)
                            : "QEMU did not greet on QMP within 20 s: " + TailOf(log_path, 600)));
  }
  h.pidfd = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  if (!h.pidfd) return std::unexpected(EndLaunch(slot, pid, "pidfd_open: " + ErrnoString(errno)));
  ::fcntl(h.pidfd.get(), F_SETFD, FD_CLOEXEC);
  return h;
}

JailerServer::Reply JailerServer::Launch(const jailer::v1::Launch& r) {
  if (auto ok = CheckLaunch(r); !ok) return std::move(ok.error());
  LaunchPlan plan;
  plan.slot = r.slot();
  plan.uid = config_.uid_base + plan.slot;
  plan.slot_dir = SlotDir(plan.slot);
  UniqueFd netns(::open(("/run/netns/" + NetnsName(plan.slot)).c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns)
    return Fail(ENOENT, fmt::format("slot {} has no network (CreateSlot first)", plan.slot));

  QemuSpec& spec = plan.spec;
  spec.binary = FindInPath(config_.qemu_binary);
  spec.name = fmt::format("deskbox-slot{}", plan.slot);
  spec.accelerator = r.accelerator();
  spec.tb_size_mib = std::clamp<uint32_t>(r.tb_size_mib() ? r.tb_size_mib() : kDefaultTbSizeMib,
                                          kMinTbSizeMib, kMaxTbSizeMib);
  spec.cpu_model = r.cpu_model();
  spec.qmp_socket = plan.slot_dir + "/qmp.sock";
  spec.agent_socket = plan.slot_dir + "/agent.sock";
  spec.console_log = plan.slot_dir + "/console.log";
  spec.seccomp = config_.seccomp;

  // Fresh slot directory, owned by the slot's uid and private to it.
  (void)RemoveTree(plan.slot_dir);
  if (auto e = MkdirOwned(config_.state_dir + "/slots", 0, 0, 0711); !e) return Fail(EIO, e.error());
  if (auto e = MkdirOwned(plan.slot_dir, plan.uid, plan.uid, 0700); !e)
    return Fail(EIO, e.error());

  std::expected<void, Reply> planned;
  if (r.mode() == jailer::v1::INCOMING_DEFER)
    planned = PlanRestore(r, plan);
  else if (r.mode() == jailer::v1::BOOT_TEMPLATE)
    planned = PlanBoot(r, plan);
  else
    return Fail(EINVAL, "launch mode missing");
  if (!planned) return std::move(planned.error());
  plan.expose.push_back({plan.slot_dir, false});
  // A restore under TCG loads the plugin that lets an idle sandbox's translation cache be
  // trimmed (TrimTranslationCache).
  if (spec.incoming_defer && spec.accelerator == "tcg" && !config_.tcg_trim_plugin.empty()) {
    spec.tcg_trim_plugin = config_.tcg_trim_plugin;
    plan.expose.push_back(
        {std::filesystem::path(config_.tcg_trim_plugin).parent_path().string(), true});
  }

  auto tap = OpenTap(plan.slot);
  if (!tap) return std::move(tap.error());
  std::string log_path = plan.slot_dir + "/qemu.log";
  UniqueFd log_fd(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!log_fd) return Fail(errno, "open qemu.log");
  (void)::fchown(log_fd.get(), plan.uid, plan.uid);

  auto pid = StartJailed(plan, netns.get(), tap->get(), log_fd.get());
  if (!pid) return std::move(pid.error());
  slots_[plan.slot] = Slot{*pid, plan.template_name, plan.spec.smp};
  (void)WriteFileAtomic(plan.slot_dir + "/qemu.pid", std::to_string(*pid) + "\n", 0644);
  auto handles = AwaitQemu(plan, *pid, log_path);
  if (!handles) return std::move(handles.error());
  log::Info(kLaunchLog, "slot {}: QEMU pid {} started ({})", plan.slot, *pid,
            spec.incoming_defer ? "incoming " + plan.template_name : "boot");
  Reply reply = Ok();
  reply.response.mutable_launch()->set_pid(*pid);
  reply.response.add_fd_roles("qmp");
  reply.response.add_fd_roles("agent");
  reply.response.add_fd_roles("pidfd");
  reply.fds.push_back(std::move(handles->qmp));
  reply.fds.push_back(std::move(handles->agent));
  reply.fds.push_back(std::move(handles->pidfd));
  return reply;
}

}  // namespace deskbox::vmhost
