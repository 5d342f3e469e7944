#pragma once
// CPU, memory and pids limits for one slot's QEMU. cgroup v1 (one hierarchy per controller, as
// on these hosts) and v2 (unified) behind one interface; Detect() picks what the host mounts.
#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <vector>

namespace deskbox::vmhost {

struct CgroupLimits {
  uint32_t cpus = 2;           // CFS quota: cpus × period
  uint64_t memory_bytes = 0;   // hard limit
  uint32_t pids = 512;
};

inline constexpr uint32_t kMinCpuWeight = 1, kMaxCpuWeight = 10000, kDefaultCpuWeight = 100, kMinCpuMaxMillis = 10;

// A running slot's CPU share and cap, which can change at any time (a sandbox's `limits`).
struct CpuLimits {
  // Share against the other slots when the CPUs are all busy: v2 cpu.weight (1..10000, the
  // kernel's default 100); v1 cpu.shares = weight × 1024 / 100, rounded down.
  uint32_t weight = kDefaultCpuWeight;
  // Cap, in thousandths of a CPU per wall-clock second (1000 = one whole CPU): a quota of
  // max_millis × 100 µs per 100 ms period. At least 10 (the kernel's minimum quota, 1 ms).
  uint32_t max_millis = 1000;
};

class Cgroups {
 public:
  virtual ~Cgroups() = default;
  virtual std::string version() const = 0;  // "v1" or "v2"
  // Creates the group for `slot` with the limits (replacing an old empty one).
  virtual std::expected<void, std::string> Create(const std::string& slot,
                                                  const CgroupLimits& limits) = 0;
  // Sets the share and cap of an existing group (validated here: out of range is an error).
  virtual std::expected<void, std::string> SetCpu(const std::string& slot, const CpuLimits& cpu) = 0;
  // Paths of the group's cgroup.procs files (one per v1 controller): the jailed child writes its
  // own pid into each between fork and exec.
  virtual std::vector<std::string> ProcsFiles(const std::string& slot) const = 0;
  // Removes the group; processes must have exited. Retries briefly while the kernel drains it.
  virtual std::expected<void, std::string> Remove(const std::string& slot) = 0;
  // Removes our subtree itself (every slot group must be gone): the jailer's sweep on exit.
  virtual std::expected<void, std::string> RemoveSubtree() = 0;
};

// root: the mount point ("/sys/fs/cgroup"); name: our subtree ("deskbox"). v2 when root is a
// cgroup2 mount, else v1.
std::unique_ptr<Cgroups> DetectCgroups(const std::string& root, const std::string& name);
// One backend, whatever root is ("v1" or "v2"; anything else is v1): for tests on a made-up tree.
std::unique_ptr<Cgroups> MakeCgroups(const std::string& version, const std::string& root,
                                     const std::string& name);

}  // namespace deskbox::vmhost
