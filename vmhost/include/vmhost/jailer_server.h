#pragma once
// deskbox-jailer: the privileged helper (root). It owns network namespaces, taps, nftables,
// cgroups and QEMU launch, and hands file descriptors to deskboxd, which runs unprivileged.
// Single-threaded on purpose: it forks jailed QEMUs and enters network namespaces with setns on
// its only thread. See vmhost/README.md for the trust boundary and vmhost/proto/jailer.proto.
#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <string>

#include "common/unique_fd.h"
#include "jailer.pb.h"
#include "vmhost/cgroups.h"

namespace deskbox::vmhost {

struct JailerConfig {
  std::string socket_path = "/run/deskbox/jailer.sock";
  std::string cache_dir = "/var/cache/deskbox";
  std::string state_dir = "/var/lib/deskbox";
  uid_t uid_base = 200000;      // slot N's QEMU runs as uid/gid uid_base + N
  uint32_t max_slots = 1000;
  uid_t client_uid = 0;         // besides root, the one uid allowed to connect (deskboxd's)
  gid_t socket_gid = 0;         // group of the socket file
  std::string qemu_binary = "qemu-system-x86_64";
  std::string netns_prefix = "dbx-";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string cgroup_name = "deskbox";
  uint64_t memory_overhead_mib = 256;  // QEMU's own memory above guest RAM and the TCG cache
  uint32_t pids_max = 512;
  bool seccomp = true;
  // The QEMU plugin loaded into restored QEMUs under TCG so that an idle sandbox's translation
  // cache can be trimmed (vmhost/src/tcg_trim_plugin.cc); empty: not used. Checked at start:
  // a plugin this QEMU will not load is dropped with a warning.
  std::string tcg_trim_plugin;
  bool sweep_on_exit = false;
  // Network namespace (a name under /run/netns) that egress dials from; empty: the jailer's own.
  std::string uplink_netns;  // on SIGTERM/SIGINT destroy every slot with our prefix (tests)
};

class JailerServer {
 public:
  explicit JailerServer(JailerConfig config);
  ~JailerServer();
  // Serves until SIGTERM/SIGINT. Returns a process exit code.
  int Run();

  // Exposed for tests: handles one request as the server would.
  struct Reply {
    jailer::v1::Response response;
    std::vector<UniqueFd> fds;
  };
  Reply Handle(const jailer::v1::Request& request);

 private:
  struct Slot {
    pid_t qemu_pid = 0;
    std::string template_name;
    uint32_t smp = 0;  // 0: not known (a QEMU adopted from an earlier jailer)
  };
  Reply CreateSlot(const jailer::v1::CreateSlot& r);
  Reply Launch(const jailer::v1::Launch& r);
  // Launch, step by step (jailer_launch.cc): check the request, plan QEMU's command and files
  // for a restore or a boot, open the slot's tap, fork the jailed QEMU, wait for its sockets.
  struct LaunchPlan;
  struct QemuHandles {
    UniqueFd qmp, agent, pidfd;
  };
  std::expected<void, Reply> CheckLaunch(const jailer::v1::Launch& r);
  std::expected<void, Reply> PlanRestore(const jailer::v1::Launch& r, LaunchPlan& plan);
  std::expected<void, Reply> PlanBoot(const jailer::v1::Launch& r, LaunchPlan& plan);
  std::expected<UniqueFd, Reply> OpenTap(uint32_t slot);
  std::expected<pid_t, Reply> StartJailed(LaunchPlan& plan, int netns_fd, int tap_fd, int log_fd);
  std::expected<QemuHandles, Reply> AwaitQemu(const LaunchPlan& plan, pid_t pid,
                                              const std::string& log_path);
  // Kills a QEMU that did not start as it should and frees its cgroup: the failure reply.
  Reply EndLaunch(uint32_t slot, pid_t pid, const std::string& why);
  Reply ConnectSocket(const jailer::v1::ConnectSocket& r);
  Reply OpenNetnsSocket(const jailer::v1::OpenNetnsSocket& r);
  Reply DestroySlot(const jailer::v1::DestroySlot& r);
  Reply ListSlots();
  Reply OpenEgressSockets(const jailer::v1::OpenEgressSockets& r);
  Reply OpenUplinkSockets(const jailer::v1::OpenUplinkSockets& r);
  Reply SetSlotPriority(const jailer::v1::SetSlotPriority& r);
  Reply SetSlotLimits(const jailer::v1::SetSlotLimits& r);
  Reply TrimTranslationCache(const jailer::v1::TrimTranslationCache& r);
  void ReapChildren();
  void KillSlotQemu(uint32_t slot);

  std::string NetnsName(uint32_t slot) const;
  std::string SlotDir(uint32_t slot) const;
  std::string CgroupName(uint32_t slot) const;

  JailerConfig config_;
  std::unique_ptr<Cgroups> cgroups_;
  std::map<uint32_t, Slot> slots_;
};

}  // namespace deskbox::vmhost
