#include "vmhost/cgroups.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fmt/format.h>
#include <thread>
#include <vector>

#include "common/files.h"

namespace deskbox::vmhost {
namespace {

bool WriteSmall(const std::string& path, const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, value.data(), value.size()) == static_cast<ssize_t>(value.size());
  ::close(fd);
  return ok;
}

std::expected<void, std::string> MkdirP(const std::string& path) {
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    cur = path.substr(0, pos);
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return std::unexpected(fmt::format("mkdir {}: {}", cur, ErrnoString(errno)));
  }
  return {};
}

std::expected<void, std::string> RmdirRetry(const std::string& path) {
  for (int i = 0; i < 100; ++i) {
    if (::rmdir(path.c_str()) == 0 || errno == ENOENT) return {};
    if (errno != EBUSY) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::unexpected(fmt::format("rmdir {}: {}", path, ErrnoString(errno)));
}

std::expected<void, std::string> CheckCpu(const CpuLimits& cpu) {
  if (cpu.weight < kMinCpuWeight || cpu.weight > kMaxCpuWeight)
    return std::unexpected(fmt::format("cpu weight {} is outside {}..{}", cpu.weight, kMinCpuWeight, kMaxCpuWeight));
  if (cpu.max_millis < kMinCpuMaxMillis)
    return std::unexpected(fmt::format("cpu max {} thousandths of a CPU is under {}", cpu.max_millis, kMinCpuMaxMillis));
  return {};
}

std::expected<void, std::string> Write(const std::string& path, const std::string& value) {
  if (!WriteSmall(path, value)) return std::unexpected(fmt::format("write {}: {}", path, ErrnoString(errno)));
  return {};
}

class CgroupsV1 final : public Cgroups {
 public:
  CgroupsV1(std::string root, std::string name) : root_(std::move(root)), name_(std::move(name)) {}
  std::string version() const override { return "v1"; }

  std::string Dir(const char* controller, const std::string& slot) const {
    return fmt::format("{}/{}/{}/{}", root_, controller, name_, slot);
  }

  std::expected<void, std::string> Create(const std::string& slot,
                                          const CgroupLimits& limits) override {
    (void)Remove(slot);
    for (const char* c : kControllers) {
      if (auto r = MkdirP(Dir(c, slot)); !r) return r;
    }
    auto set = [&](const char* c, const char* file, std::string v) -> std::expected<void, std::string> {
      std::string p = Dir(c, slot) + "/" + file;
      if (!WriteSmall(p, v)) return std::unexpected(fmt::format("write {}: {}", p, ErrnoString(errno)));
      return {};
    };
    if (auto r = set("cpu", "cpu.cfs_period_us", "100000"); !r) return r;
    if (auto r = set("cpu", "cpu.cfs_quota_us", std::to_string(100000ull * limits.cpus)); !r) return r;
    if (limits.memory_bytes) {
      if (auto r = set("memory", "memory.limit_in_bytes", std::to_string(limits.memory_bytes)); !r)
        return r;
    }
    if (auto r = set("pids", "pids.max", std::to_string(limits.pids)); !r) return r;
    return {};
  }


  std::expected<void, std::string> SetCpu(const std::string& slot, const CpuLimits& cpu) override {
    if (auto r = CheckCpu(cpu); !r) return r;
    const std::string dir = Dir("cpu", slot);
    if (auto r = Write(dir + "/cpu.shares", std::to_string(std::max<uint64_t>(2, uint64_t{cpu.weight} * 1024 / 100))); !r)
      return r;
    return Write(dir + "/cpu.cfs_quota_us", std::to_string(uint64_t{cpu.max_millis} * 100));
  }

  std::vector<std::string> ProcsFiles(const std::string& slot) const override {
    std::vector<std::string> v;
    for (const char* c : kControllers) v.push_back(Dir(c, slot) + "/cgroup.procs");
    return v;
  }

  std::expected<void, std::string> Remove(const std::string& slot) override {
    std::string err;
    for (const char* c : kControllers) {
      if (auto r = RmdirRetry(Dir(c, slot)); !r) err = r.error();
    }
    if (!err.empty()) return std::unexpected(err);
    return {};
  }

  std::expected<void, std::string> RemoveSubtree() override {
    std::string err;
    for (const char* c : kControllers) {
      if (auto r = RmdirRetry(fmt::format("{}/{}/{}", root_, c, name_)); !r) err = r.error();
    }
    if (!err.empty()) return std::unexpected(err);
    return {};
  }

 private:
  static constexpr const char* kControllers[] = {"cpu", "memory", "pids"};
  std::string root_, name_;
};

class CgroupsV2 final : public Cgroups {
 public:
  CgroupsV2(std::string root, std::string name) : root_(std::move(root)), name_(std::move(name)) {}
  std::string version() const override { return "v2"; }
  std::string Dir(const std::string& slot) const { return fmt::format("{}/{}/{}", root_, name_, slot); }

  std::expected<void, std::string> Create(const std::string& slot,
                                          const CgroupLimits& limits) override {
    (void)Remove(slot);
    std::string parent = fmt::format("{}/{}", root_, name_);
    if (auto r = MkdirP(parent); !r) return r;
    WriteSmall(root_ + "/cgroup.subtree_control", "+cpu +memory +pids");
    if (!WriteSmall(parent + "/cgroup.subtree_control", "+cpu +memory +pids"))
      return std::unexpected(fmt::format("enable controllers in {}: {}", parent, ErrnoString(errno)));
    if (auto r = MkdirP(Dir(slot)); !r) return r;
    auto set = [&](const char* file, std::string v) -> std::expected<void, std::string> {
      std::string p = Dir(slot) + "/" + file;
      if (!WriteSmall(p, v)) return std::unexpected(fmt::format("write {}: {}", p, ErrnoString(errno)));
      return {};
    };
    if (auto r = set("cpu.max", fmt::format("{} 100000", 100000ull * limits.cpus)); !r) return r;
    if (limits.memory_bytes) {
      if (auto r = set("memory.max", std::to_string(limits.memory_bytes)); !r) return r;
    }
    if (auto r = set("pids.max", std::to_string(limits.pids)); !r) return r;
    return {};
  }

  std::expected<void, std::string> SetCpu(const std::string& slot, const CpuLimits& cpu) override {
    if (auto r = CheckCpu(cpu); !r) return r;
    if (auto r = Write(Dir(slot) + "/cpu.weight", std::to_string(cpu.weight)); !r) return r;
    return Write(Dir(slot) + "/cpu.max", fmt::format("{} 100000", uint64_t{cpu.max_millis} * 100));
  }

  std::vector<std::string> ProcsFiles(const std::string& slot) const override {
    return {Dir(slot) + "/cgroup.procs"};
  }
  std::expected<void, std::string> Remove(const std::string& slot) override {
    return RmdirRetry(Dir(slot));
  }
  std::expected<void, std::string> RemoveSubtree() override {
    return RmdirRetry(fmt::format("{}/{}", root_, name_));
  }

 private:
  std::string root_, name_;
};

}  // namespace

std::unique_ptr<Cgroups> DetectCgroups(const std::string& root, const std::string& name) {
  struct statfs fs;
  bool v2 = ::statfs(root.c_str(), &fs) == 0 && fs.f_type == CGROUP2_SUPER_MAGIC;
  return MakeCgroups(v2 ? "v2" : "v1", root, name);
}

std::unique_ptr<Cgroups> MakeCgroups(const std::string& version, const std::string& root,
                                     const std::string& name) {
  if (version == "v2") return std::make_unique<CgroupsV2>(root, name);
  return std::make_unique<CgroupsV1>(root, name);
}

}  // namespace deskbox::vmhost
