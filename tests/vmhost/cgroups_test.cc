// Both cgroup backends against a made-up cgroupfs tree in a temp dir. The kernel makes a group's
// control files when the group's directory is made; here the test makes them beforehand, so
// each test states which files the kernel would offer. What these hosts mount (v1) is also tested
// live by every guest test; v2 only here (docs/design.md, "cgroups").
#include "vmhost/cgroups.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace deskbox::vmhost {
namespace {

namespace fs = std::filesystem;

class FakeCgroupfs : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/cgroups_test.XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Directory `dir` under the root with empty control files, as the kernel would show it.
  void Group(const std::string& dir, std::initializer_list<const char*> files) {
    fs::create_directories(root_ / dir);
    for (const char* f : files) std::ofstream(root_ / dir / f).flush();
  }
  std::string Read(const std::string& path) {
    std::ifstream in(root_ / path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // What rmdir on cgroupfs allows despite the control files: empty the directory first.
  void DropFiles(const std::string& dir) {
    for (const auto& e : fs::directory_iterator(root_ / dir)) fs::remove(e.path());
  }

  fs::path root_;
};

TEST_F(FakeCgroupfs, V2SetsTheLimitsAndEnablesControllersDownTheTree) {
  Group("", {"cgroup.subtree_control"});
  Group("deskbox", {"cgroup.subtree_control"});
  Group("deskbox/dbx-3", {"cpu.max", "memory.max", "pids.max", "cgroup.procs"});
  auto cg = MakeCgroups("v2", root_.string(), "deskbox");
  EXPECT_EQ(cg->version(), "v2");
  auto r = cg->Create("dbx-3", {.cpus = 2, .memory_bytes = 3u << 30, .pids = 256});
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(Read("cgroup.subtree_control"), "+cpu +memory +pids");
  EXPECT_EQ(Read("deskbox/cgroup.subtree_control"), "+cpu +memory +pids");
  EXPECT_EQ(Read("deskbox/dbx-3/cpu.max"), "200000 100000");
  EXPECT_EQ(Read("deskbox/dbx-3/memory.max"), std::to_string(3ull << 30));
  EXPECT_EQ(Read("deskbox/dbx-3/pids.max"), "256");
  EXPECT_EQ(cg->ProcsFiles("dbx-3"),
            std::vector<std::string>{(root_ / "deskbox/dbx-3/cgroup.procs").string()});
}

TEST_F(FakeCgroupfs, V2LeavesMemoryAloneWithoutALimit) {
  Group("deskbox", {"cgroup.subtree_control"});
  Group("deskbox/s", {"cpu.max", "memory.max", "pids.max"});
  auto cg = MakeCgroups("v2", root_.string(), "deskbox");
  ASSERT_TRUE(cg->Create("s", {.cpus = 1, .memory_bytes = 0, .pids = 512}));
  EXPECT_EQ(Read("deskbox/s/memory.max"), "");
  EXPECT_EQ(Read("deskbox/s/cpu.max"), "100000 100000");
}

TEST_F(FakeCgroupfs, V2WithoutTheControllersFailsNamingTheFile) {
  // A kernel that does not delegate the controllers: the subtree has no subtree_control file.
  auto cg = MakeCgroups("v2", root_.string(), "deskbox");
  auto r = cg->Create("s", {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("enable controllers in " + (root_ / "deskbox").string()),
            std::string::npos)
      << r.error();
  // A group without a memory controller: memory.max is missing.
  Group("deskbox", {"cgroup.subtree_control"});
  Group("deskbox/s", {"cpu.max", "pids.max"});
  r = cg->Create("s", {.memory_bytes = 1 << 30});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("write " + (root_ / "deskbox/s/memory.max").string()),
            std::string::npos)
      << r.error();
}

TEST_F(FakeCgroupfs, V1WritesEachControllersHierarchy) {
  Group("cpu/deskbox/s", {"cpu.cfs_period_us", "cpu.cfs_quota_us", "cgroup.procs"});
  Group("memory/deskbox/s", {"memory.limit_in_bytes", "cgroup.procs"});
  Group("pids/deskbox/s", {"pids.max", "cgroup.procs"});
  auto cg = MakeCgroups("v1", root_.string(), "deskbox");
  EXPECT_EQ(cg->version(), "v1");
  auto r = cg->Create("s", {.cpus = 3, .memory_bytes = 123456789, .pids = 64});
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(Read("cpu/deskbox/s/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read("cpu/deskbox/s/cpu.cfs_quota_us"), "300000");
  EXPECT_EQ(Read("memory/deskbox/s/memory.limit_in_bytes"), "123456789");
  EXPECT_EQ(Read("pids/deskbox/s/pids.max"), "64");
  std::vector<std::string> procs;
  for (const char* c : {"cpu", "memory", "pids"})
    procs.push_back((root_ / c / "deskbox/s/cgroup.procs").string());
  EXPECT_EQ(cg->ProcsFiles("s"), procs);
}

TEST_F(FakeCgroupfs, V1WithoutAControllerFailsNamingTheFile) {
  Group("cpu/deskbox/s", {"cpu.cfs_period_us", "cpu.cfs_quota_us"});
  Group("memory/deskbox/s", {"memory.limit_in_bytes"});
  fs::create_directories(root_ / "pids");
  // pids/deskbox/s is made by Create (MkdirP) but has no pids.max: the controller is missing.
  auto cg = MakeCgroups("v1", root_.string(), "deskbox");
  auto r = cg->Create("s", {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("write " + (root_ / "pids/deskbox/s/pids.max").string()),
            std::string::npos)
      << r.error();
}

TEST_F(FakeCgroupfs, CpuShareAndCapOfARunningGroup) {
  // Empty control files again before each write (a plain file keeps a longer old value's tail).
  auto reset = [&] {
    Group("deskbox/s", {"cpu.weight", "cpu.max"});
    Group("cpu/deskbox/s", {"cpu.shares", "cpu.cfs_quota_us"});
  };
  reset();
  auto v2 = MakeCgroups("v2", root_.string(), "deskbox");
  auto v1 = MakeCgroups("v1", root_.string(), "deskbox");
  ASSERT_TRUE(v2->SetCpu("s", {.weight = 10, .max_millis = 500}));
  EXPECT_EQ(Read("deskbox/s/cpu.weight"), "10");
  EXPECT_EQ(Read("deskbox/s/cpu.max"), "50000 100000");
  ASSERT_TRUE(v1->SetCpu("s", {.weight = 10, .max_millis = 500}));
  EXPECT_EQ(Read("cpu/deskbox/s/cpu.shares"), "102");
  EXPECT_EQ(Read("cpu/deskbox/s/cpu.cfs_quota_us"), "50000");
  // The extremes: weight 1 is 10 v1 shares; 10 thousandths is a 1 ms quota.
  reset();
  ASSERT_TRUE(v1->SetCpu("s", {.weight = 1, .max_millis = 10}));
  EXPECT_EQ(Read("cpu/deskbox/s/cpu.shares"), "10");  // 1 × 1024 / 100, rounded down
  EXPECT_EQ(Read("cpu/deskbox/s/cpu.cfs_quota_us"), "1000");
  // Out of range is refused before anything is written.
  reset();
  ASSERT_TRUE(v2->SetCpu("s", {.weight = 10000, .max_millis = 2000}));
  for (auto* cg : {v1.get(), v2.get()}) {
    SCOPED_TRACE(cg->version());
    for (CpuLimits bad : {CpuLimits{.weight = 0}, CpuLimits{.weight = 10001}, CpuLimits{.max_millis = 9}}) {
      auto r = cg->SetCpu("s", bad);
      ASSERT_FALSE(r);
      EXPECT_NE(r.error().find(bad.max_millis < 10 ? "cpu max 9" : "cpu weight"), std::string::npos) << r.error();
    }
  }
  EXPECT_EQ(Read("deskbox/s/cpu.weight"), "10000");
  EXPECT_EQ(Read("deskbox/s/cpu.max"), "200000 100000");
  // A group that is not there: the error names the file.
  auto r = v2->SetCpu("gone", {});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("write " + (root_ / "deskbox/gone/cpu.weight").string()), std::string::npos) << r.error();
}

TEST_F(FakeCgroupfs, RemoveTakesTheGroupAndThenTheSubtree) {
  for (const char* v : {"v1", "v2"}) {
    SCOPED_TRACE(v);
    std::string base = std::string(v) == "v2" ? "deskbox" : "pids/deskbox";
    auto cg = MakeCgroups(v, root_.string(), "deskbox");
    EXPECT_TRUE(cg->Remove("gone")) << "a group that is not there is removed already";
    fs::create_directories(root_ / base / "s");
    std::ofstream(root_ / base / "s" / "busy").flush();
    auto r = cg->Remove("s");  // cannot go: not empty (on cgroupfs: processes still in it)
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("rmdir " + (root_ / base / "s").string()), std::string::npos)
        << r.error();
    EXPECT_FALSE(cg->RemoveSubtree()) << "the subtree goes only once its groups are gone";
    DropFiles(base + "/s");
    EXPECT_TRUE(cg->Remove("s"));
    EXPECT_FALSE(fs::exists(root_ / base / "s"));
    EXPECT_TRUE(cg->RemoveSubtree());
    EXPECT_FALSE(fs::exists(root_ / base));
  }
}

}  // namespace
}  // namespace deskbox::vmhost
