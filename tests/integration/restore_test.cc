// Real guests under TCG, restored from the template: services answer, clones are independent,
// clocks and random state are fixed up, slots are isolated from each other, and nothing leaks.
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "common/files.h"
#include "common/smaps.h"
#include "guest_fixture.h"
#include "vmhost/qemu_command.h"
#include "vmhost/template.h"

namespace deskbox::testing {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using nlohmann::json;

class RestoreTest : public GuestTest {};

TEST_F(RestoreTest, RestoredSandboxAnswersRfbAndCdp) {
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->state(), vmhost::SandboxState::kRunning);
  EXPECT_EQ(RfbBanner(*sb), "RFB 003.008\n");
  json version = json::parse(CdpHttp(*sb, "GET", "/json/version"), nullptr, false);
  ASSERT_TRUE(version.is_object());
  EXPECT_NE(version.value("Browser", "").find("Chrom"), std::string::npos) << version.dump();
  // JavaScript runs in the restored browser.
  EXPECT_EQ(CdpEvaluate(*sb, "6 * 7"), "42");
}

TEST_F(RestoreTest, TwoClonesAreIndependent) {
  auto a = CreateOrDie();
  auto b = CreateOrDie();
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->slot(), b->slot());
  json ta = json::parse(CdpHttp(*a, "PUT", "/json/new?data:text/html,%3Ctitle%3Eclone-a%3C/title%3E"), nullptr, false);
  json tb = json::parse(CdpHttp(*b, "PUT", "/json/new?data:text/html,%3Ctitle%3Eclone-b%3C/title%3E"), nullptr, false);
  ASSERT_TRUE(ta.is_object() && tb.is_object());
  // Each sees its own page and not the other's.
  auto titles = [&](vmhost::Sandbox& sb) {
    std::set<std::string> t;
    for (int i = 0; i < 50; ++i) {
      t.clear();
      json list = json::parse(CdpHttp(sb, "GET", "/json/list"), nullptr, false);
      for (const auto& p : list) t.insert(p.value("title", ""));
      if (t.count("clone-a") || t.count("clone-b")) break;
      std::this_thread::sleep_for(100ms);
    }
    return t;
  };
  auto seen_a = titles(*a);
  auto seen_b = titles(*b);
  EXPECT_TRUE(seen_a.count("clone-a"));
  EXPECT_FALSE(seen_a.count("clone-b"));
  EXPECT_TRUE(seen_b.count("clone-b"));
  EXPECT_FALSE(seen_b.count("clone-a"));
  // Files written in one clone do not appear in the other (separate overlays).
  Exec(*a, "echo only-a > /root/marker");
  EXPECT_EQ(Exec(*b, "cat /root/marker 2>/dev/null || echo absent"), "absent\n");
}

TEST_F(RestoreTest, ClockIsSetFromTheHost) {
  auto m = vmhost::OpenTemplate(env_.cache_dir + "/templates/" + env_.template_name, vmhost::VerifyMode::kQuick);
  ASSERT_TRUE(m);
  auto age = std::time(nullptr) - m->created_unix_s();
  RecordProperty("template_age_s", std::to_string(age));
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  timespec before, after;
  clock_gettime(CLOCK_REALTIME, &before);
  std::string out = Exec(*sb, "date +%s.%N");
  clock_gettime(CLOCK_REALTIME, &after);
  double guest = std::stod(out);
  double lo = before.tv_sec + before.tv_nsec / 1e9 - 1.0;
  double hi = after.tv_sec + after.tv_nsec / 1e9 + 1.0;
  EXPECT_GE(guest, lo) << "guest clock behind (template is " << age << " s old)";
  EXPECT_LE(guest, hi) << "guest clock ahead";
}

TEST_F(RestoreTest, ClonesDoNotShareRandomState) {
  auto a = CreateOrDie();
  auto b = CreateOrDie();
  ASSERT_TRUE(a && b);
  std::string cmd = "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'";
  std::string ra = Exec(*a, cmd), rb = Exec(*b, cmd);
  EXPECT_EQ(ra.size(), 64u);
  EXPECT_NE(ra, rb) << "kernel RNG identical across clones";
  std::string js = "Array.from(crypto.getRandomValues(new Uint8Array(16))).join(',')";
  std::string ja = CdpEvaluate(*a, js), jb = CdpEvaluate(*b, js);
  EXPECT_FALSE(ja.empty());
  EXPECT_NE(ja, jb) << "Chromium's crypto.getRandomValues identical across clones";
  std::string mr = "String(Math.random())";
  EXPECT_NE(CdpEvaluate(*a, mr), CdpEvaluate(*b, mr)) << "Math.random identical across clones";
}

// Runs `fn` in a child process inside QEMU A's mount namespace with A's uid; returns its exit code.
int InSlotContext(pid_t qemu_pid, uid_t uid, const std::function<int()>& fn) {
  pid_t child = ::fork();
  if (child == 0) {
    int ns = ::open(("/proc/" + std::to_string(qemu_pid) + "/ns/mnt").c_str(), O_RDONLY);
    if (ns < 0 || ::setns(ns, CLONE_NEWNS) != 0) ::_exit(100);
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 || ::setresuid(uid, uid, uid) != 0)
      ::_exit(101);
    ::_exit(fn());
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

TEST_F(RestoreTest, SlotsCannotReachEachOther) {
  auto a = CreateOrDie();
  auto b = CreateOrDie();
  ASSERT_TRUE(a && b);
  uid_t uid_a = env_.uid_base + a->slot();
  std::string b_overlay = env_.state_dir + "/slots/" + std::to_string(b->slot()) + "/overlay.qcow2";
  std::string a_overlay = env_.state_dir + "/slots/" + std::to_string(a->slot()) + "/overlay.qcow2";
  ASSERT_TRUE(std::filesystem::exists(b_overlay));
  // The QEMUs really run as their slots' uids.
  struct stat st;
  ASSERT_EQ(::stat(("/proc/" + std::to_string(a->qemu_pid())).c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, uid_a);
  // Sanity: the probe works, A can read its own overlay.
  EXPECT_EQ(InSlotContext(a->qemu_pid(), uid_a, [&] { return ::open(a_overlay.c_str(), O_RDONLY) >= 0 ? 0 : 1; }), 0);
  // B's overlay is not even visible in A's mount namespace; the template is read-only there.
  EXPECT_EQ(InSlotContext(a->qemu_pid(), uid_a, [&] { return ::open(b_overlay.c_str(), O_RDONLY) >= 0 ? 0 : errno == ENOENT ? 1 : 2; }), 1);
  std::string ram = env_.cache_dir + "/templates/" + env_.template_name + "/ram";
  EXPECT_EQ(InSlotContext(a->qemu_pid(), uid_a, [&] { return ::open(ram.c_str(), O_RDWR) >= 0 ? 0 : 1; }), 1);
  // Memory and ptrace of B's QEMU are refused.
  std::string b_mem = "/proc/" + std::to_string(b->qemu_pid()) + "/mem";
  EXPECT_EQ(InSlotContext(a->qemu_pid(), uid_a, [&] { return ::open(b_mem.c_str(), O_RDONLY) >= 0 ? 0 : 1; }), 1);
  pid_t b_pid = b->qemu_pid();
  EXPECT_EQ(InSlotContext(a->qemu_pid(), uid_a, [&] { return ::ptrace(PTRACE_ATTACH, b_pid, nullptr, nullptr) == 0 ? 0 : 1; }), 1);
  // The jailer's socket and the image cache are hidden from a slot.
  EXPECT_EQ(InSlotContext(a->qemu_pid(), uid_a, [&] { return ::access((env_.run_dir + "/jailer.sock").c_str(), F_OK) == 0 ? 0 : 1; }), 1);
  EXPECT_EQ(InSlotContext(a->qemu_pid(), uid_a, [&] { return ::access((env_.cache_dir + "/images").c_str(), F_OK) == 0 ? 0 : 1; }), 1);
}

std::vector<std::string> Netns(const std::string& prefix) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec))
    if (e.path().filename().string().starts_with(prefix)) v.push_back(e.path().filename().string());
  return v;
}

bool CgroupExists(const std::string& name, uint32_t slot, const std::string& prefix) {
  std::string leaf = name + "/" + prefix + std::to_string(slot);
  return std::filesystem::exists("/sys/fs/cgroup/memory/" + leaf) ||
         std::filesystem::exists("/sys/fs/cgroup/" + leaf);
}

// A restore for a waiting client hands the sandbox out before its pages have reloaded in new
// renderers; the desktop and the agent answer at once, and WaitBrowserFresh is the gate that
// every page client passes. A sandbox destroyed while it reloads leaves nothing behind.
TEST_F(RestoreTest, HandedOutBeforeItsPagesReloadWhichTheGateWaitsFor) {
  double created_ms =
      std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto sb = CreateOrDie(/*wait_browser=*/false);
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->state(), vmhost::SandboxState::kRunning);
  EXPECT_EQ(sb->path(), vmhost::CreatePath::kCold);
  EXPECT_TRUE(sb->browser_refreshing()) << "create waited for the reload";
  agent::v1::Request ping;
  ping.mutable_ping();
  EXPECT_TRUE(Run(sb->agent()->Call(std::move(ping), 10s)));
  auto fresh = Run(manager_->WaitBrowserFresh(sb, 180s), 200s);
  ASSERT_TRUE(fresh) << fresh.error().message;
  EXPECT_FALSE(sb->browser_refreshing());
  // The page's document was made by a renderer started after the hand-out (the guest clock is
  // the host's since then).
  std::string origin = CdpEvaluate(*sb, "performance.timeOrigin");
  ASSERT_FALSE(origin.empty());
  EXPECT_GE(std::stod(origin), created_ms - 1000) << "the page was not reloaded after the restore";
  // Waiting again returns at once.
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(Run(manager_->WaitBrowserFresh(sb, 1s)));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 500ms);

  auto gone = CreateOrDie(/*wait_browser=*/false);
  ASSERT_TRUE(gone);
  ASSERT_TRUE(gone->browser_refreshing());
  pid_t pid = gone->qemu_pid();
  std::string slot_dir = env_.state_dir + "/slots/" + std::to_string(gone->slot());
  ASSERT_TRUE(Run(manager_->Destroy(gone->id())));
  auto after = Run(manager_->WaitBrowserFresh(gone, 60s), 90s);
  ASSERT_FALSE(after);
  EXPECT_NE(after.error().message.find("stopped"), std::string::npos) << after.error().message;
  EXPECT_NE(::kill(pid, 0), 0) << "QEMU still alive";
  EXPECT_FALSE(std::filesystem::exists(slot_dir)) << "slot files left behind";
  EXPECT_EQ(Netns(env_.netns_prefix).size(), 1u) << "netns left behind";
  // The first sandbox still works.
  EXPECT_EQ(CdpEvaluate(*sb, "6 * 7"), "42");
}

TEST_F(RestoreTest, DestroyLeavesNothingBehind) {
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  pid_t pid = sb->qemu_pid();
  uint32_t slot = sb->slot();
  std::string slot_dir = env_.state_dir + "/slots/" + std::to_string(slot);
  ASSERT_EQ(::kill(pid, 0), 0);
  ASSERT_EQ(Netns(env_.netns_prefix).size(), 1u);
  ASSERT_TRUE(CgroupExists(env_.cgroup_name, slot, env_.netns_prefix));
  // The cgroup limits are applied to the QEMU.
  auto procs = ReadFile("/sys/fs/cgroup/pids/" + env_.cgroup_name + "/" + env_.netns_prefix + std::to_string(slot) + "/cgroup.procs", 4096);
  if (procs) {
    EXPECT_NE(procs->find(std::to_string(pid)), std::string::npos);
  }
  auto r = Run(manager_->Destroy(sb->id()));
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_FALSE(manager_->Find(sb->id()));
  EXPECT_NE(::kill(pid, 0), 0) << "QEMU still alive";
  EXPECT_TRUE(Netns(env_.netns_prefix).empty()) << "netns left behind";
  EXPECT_FALSE(CgroupExists(env_.cgroup_name, slot, env_.netns_prefix)) << "cgroup left behind";
  EXPECT_FALSE(std::filesystem::exists(slot_dir)) << "slot files left behind";
  // With no slot live, the jailer removes its cgroup subtree when it exits.
  RunVoid(manager_->Shutdown(), 120s);
  manager_.reset();
  host_.reset();
  for (const char* dir : {"cpu/", "memory/", "pids/", ""})  // v1 controllers, then v2
    EXPECT_FALSE(std::filesystem::exists(std::string("/sys/fs/cgroup/") + dir + env_.cgroup_name))
        << "cgroup /sys/fs/cgroup/" << dir << env_.cgroup_name << " left behind after the jailer exited";
}

TEST_F(RestoreTest, KilledQemuIsDetectedAndCleanedUp) {
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  std::string slot_dir = env_.state_dir + "/slots/" + std::to_string(sb->slot());
  ASSERT_EQ(::kill(sb->qemu_pid(), SIGKILL), 0);
  bool failed = WaitUntil(
      [&] { return sb->state() == vmhost::SandboxState::kFailed && !std::filesystem::exists(slot_dir); }, 5s);
  EXPECT_TRUE(failed) << "state is " << vmhost::ToString(sb->state());
  EXPECT_NE(sb->failure().find("QEMU exited"), std::string::npos) << sb->failure();
  EXPECT_TRUE(Netns(env_.netns_prefix).empty());
  // The record stays until its owner removes it.
  ASSERT_TRUE(manager_->Find(sb->id()));
  EXPECT_TRUE(Run(manager_->Destroy(sb->id())));
}

TEST_F(RestoreTest, PauseAndResumeKeepTheDesktop) {
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  CdpHttp(*sb, "PUT", "/json/new?data:text/html,%3Ctitle%3Ekept%3C/title%3E");
  auto has_page = [&] {
    for (int i = 0; i < 100; ++i) {
      if (CdpHttp(*sb, "GET", "/json/list").find("\"kept\"") != std::string::npos) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  };
  ASSERT_TRUE(has_page()) << "the page did not load before the pause";
  ASSERT_TRUE(Run(manager_->Pause(sb->id())));
  EXPECT_EQ(sb->state(), vmhost::SandboxState::kPaused);
  auto again = Run(manager_->Pause(sb->id()));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, vmhost::VmError::Code::kInvalidState);
  ASSERT_TRUE(Run(manager_->Resume(sb->id())));
  EXPECT_EQ(sb->state(), vmhost::SandboxState::kRunning);
  std::string list = CdpHttp(*sb, "GET", "/json/list");
  EXPECT_NE(list.find("\"kept\""), std::string::npos);
}

// KiB in memory of a QEMU's translation cache (its anonymous read/write/execute mappings), and
// whether the trim plugin is loaded into it: from /proc/PID/smaps.
std::pair<bool, uint64_t> CacheResidentKib(pid_t pid) {
  auto smaps = ReadFile("/proc/" + std::to_string(pid) + "/smaps", 64 << 20);
  bool plugin = false;
  uint64_t kib = 0;
  for (const auto& m : ParseSmaps(smaps.value_or(""))) {
    if (m.perms == "rwxp" && m.anonymous()) kib += m.rss_kib;
    plugin = plugin || m.path.ends_with("/libdeskbox-tcgtrim.so");
  }
  return {plugin, kib};
}

TEST_F(RestoreTest, TranslationCacheTrimsWithoutHurtingTheGuest) {
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  // The browser's reload after the restore filled the cache (hundreds of MiB under TCG).
  auto [plugin, resident] = CacheResidentKib(sb->qemu_pid());
  ASSERT_TRUE(plugin) << "a restore under TCG runs without the trim plugin";
  EXPECT_GT(resident, 64u << 10);
  auto t = Run(manager_->TrimTranslationCache(sb->id()));
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_TRUE(t->trimmable);
  EXPECT_GT(t->resident_before_kib, 64u << 10);
  // The trim happens the next time a vCPU idles: within moments on a desktop at rest.
  uint64_t after = resident;
  EXPECT_TRUE(WaitUntil(
      [&] { return (after = CacheResidentKib(sb->qemu_pid()).second) < t->resident_before_kib / 4; },
      10s))
      << t->resident_before_kib << " KiB before the trim, " << after << " after";
  EXPECT_EQ(sb->idle_trim().trims(), 1u);
  // The guest runs on: it translates again what it runs.
  EXPECT_EQ(CdpEvaluate(*sb, "6 * 7"), "42");
  EXPECT_EQ(Exec(*sb, "echo trimmed"), "trimmed\n");
  EXPECT_EQ(RfbBanner(*sb), "RFB 003.008\n");
  EXPECT_EQ(CdpEvaluate(*sb, "document.readyState"), "\"complete\"");
  // Only what the guest ran again is back, not the whole cache.
  EXPECT_LT(CacheResidentKib(sb->qemu_pid()).second, t->resident_before_kib) << "the whole cache came back";
  // Asked to trim only a cache bigger than 1 GiB, the jailer leaves this one: not signalled, not
  // counted, its size reported.
  unsigned trims = sb->idle_trim().trims();
  auto small = Run(manager_->TrimTranslationCache(sb->id(), 1u << 20));
  ASSERT_TRUE(small) << small.error().message;
  EXPECT_FALSE(small->trimmable);
  EXPECT_GT(small->resident_before_kib, 0u);
  EXPECT_EQ(sb->idle_trim().trims(), trims);
  // A second trim works as the first did.
  auto again = Run(manager_->TrimTranslationCache(sb->id()));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_TRUE(WaitUntil(
      [&] { return CacheResidentKib(sb->qemu_pid()).second < t->resident_before_kib / 4; }, 10s));
  EXPECT_EQ(Exec(*sb, "echo again"), "again\n");
  // A sandbox that is not there, or paused (it would trim as it resumes), is refused.
  auto none = Run(manager_->TrimTranslationCache("sb-none"));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, vmhost::VmError::Code::kNotFound);
  ASSERT_TRUE(Run(manager_->Pause(sb->id())));
  auto paused = Run(manager_->TrimTranslationCache(sb->id()));
  ASSERT_FALSE(paused);
  EXPECT_EQ(paused.error().code, vmhost::VmError::Code::kInvalidState);
  ASSERT_TRUE(Run(manager_->Resume(sb->id())));
  EXPECT_EQ(Exec(*sb, "echo resumed"), "resumed\n");
  std::string slot_dir = env_.state_dir + "/slots/" + std::to_string(sb->slot());
  ASSERT_TRUE(Run(manager_->Destroy(sb->id())));
  EXPECT_FALSE(std::filesystem::exists(slot_dir)) << "slot files left behind";
}

// An idle sandbox gives its translation cache back by itself, once while its cache stays under
// the mark: the retranslation right after a trim does not count as the guest being busy.
class IdleTrimTest : public GuestTest {
 protected:
  vmhost::VmHostConfig Config() override {
    auto c = GuestTest::Config();
    c.trim_idle_after = 5s;
    c.trim_idle_cpu = 0.5;  // idle guests use a few % of a core; a loaded CI host may double it
    c.trim_regrown_mib = 1024;  // more than the whole cache (tb-size 512): never again while idle
    return c;
  }
};

TEST_F(IdleTrimTest, IdleSandboxTrimsItsTranslationCache) {
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  ASSERT_TRUE(WaitUntil([&] { return sb->idle_trim().trims() > 0; }, 120s)) << "an idle sandbox was never trimmed";
  // It refills only with what the idle desktop runs.
  uint64_t resident = 0;
  EXPECT_TRUE(WaitUntil(
      [&] { return (resident = CacheResidentKib(sb->qemu_pid()).second) < (64u << 10); }, 10s))
      << resident << " KiB of translation cache in memory after an idle trim";
  unsigned trims = sb->idle_trim().trims();
  EXPECT_FALSE(WaitUntil([&] { return sb->idle_trim().trims() != trims; }, 15s))
      << "an idle sandbox was trimmed again without having been busy";
  EXPECT_EQ(CdpEvaluate(*sb, "6 * 7"), "42");
}

// An idle sandbox whose cache grows back past the mark is trimmed again, without having been
// busy, and no sooner than trim_idle_after after the last look. The mark here (16 MiB) is under
// what the idle desktop translates within seconds of a trim.
class RetrimTest : public IdleTrimTest {
 protected:
  vmhost::VmHostConfig Config() override {
    auto c = IdleTrimTest::Config();
    c.trim_regrown_mib = 16;
    return c;
  }
};

TEST_F(RetrimTest, AnIdleSandboxWhoseCacheGrewBackIsTrimmedAgain) {
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  ASSERT_TRUE(WaitUntil([&] { return sb->idle_trim().trims() > 0; }, 120s)) << "an idle sandbox was never trimmed";
  auto first = std::chrono::steady_clock::now();
  unsigned trims = sb->idle_trim().trims();
  ASSERT_TRUE(WaitUntil([&] { return sb->idle_trim().trims() > trims; }, 90s))
      << "an idle sandbox with " << CacheResidentKib(sb->qemu_pid()).second
      << " KiB of translation cache (mark 16 MiB) was not trimmed again";
  EXPECT_GE(std::chrono::steady_clock::now() - first, 5s) << "trimmed again before trim_idle_after";
  EXPECT_EQ(CdpEvaluate(*sb, "6 * 7"), "42");
  EXPECT_EQ(Exec(*sb, "echo retrimmed"), "retrimmed\n");
}

class CorruptTemplateTest : public GuestTest {
 protected:
  void SetUp() override {
    GuestTest::SetUp();
    copy_ = "bad-copy-" + std::to_string(::getpid());
    std::string src = env_.cache_dir + "/templates/" + env_.template_name;
    std::string dst = env_.cache_dir + "/templates/" + copy_;
    std::filesystem::create_directories(dst);
    // Big files are hard links (never modified); the small state file is copied and damaged.
    for (const char* f : {vmhost::kDiskFile, vmhost::kRamFile})
      std::filesystem::create_hard_link(src + "/" + f, dst + "/" + f);
    for (const char* f : {vmhost::kStateFile, vmhost::kManifestFile})
      std::filesystem::copy_file(src + "/" + f, dst + "/" + f);
    std::filesystem::permissions(dst + "/" + vmhost::kStateFile, std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::add);
    std::fstream s(dst + "/" + vmhost::kStateFile, std::ios::in | std::ios::out | std::ios::binary);
    s.seekg(1000);
    char c;
    s.get(c);
    s.seekp(1000);
    s.put(static_cast<char>(c ^ 0x5a));
    s.close();
    std::filesystem::permissions(dst + "/" + vmhost::kStateFile, std::filesystem::perms::owner_write,
                                 std::filesystem::perm_options::remove);
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(env_.cache_dir + "/templates/" + copy_, ec);
    GuestTest::TearDown();
  }
  std::string copy_;
};

TEST_F(CorruptTemplateTest, DamagedTemplateIsRefusedWithTheCause) {
  auto r = vmhost::OpenTemplate(env_.cache_dir + "/templates/" + copy_, vmhost::VerifyMode::kFull);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, vmhost::TemplateError::Code::kMismatch);
  EXPECT_NE(r.error().message.find("state"), std::string::npos) << r.error().message;
  // A damaged manifest stops a manager from starting on it.
  std::string manifest = env_.cache_dir + "/templates/" + copy_ + "/" + vmhost::kManifestFile;
  std::filesystem::permissions(manifest, std::filesystem::perms::owner_write, std::filesystem::perm_options::add);
  { std::ofstream(manifest, std::ios::app) << "junk"; }
  vmhost::VmHostConfig c = Config();
  c.template_name = copy_;
  vmhost::SandboxManager m(io_->get_executor(), *jailer_, c);
  auto started = m.Start();
  ASSERT_FALSE(started);
  EXPECT_NE(started.error().message.find("manifest"), std::string::npos) << started.error().message;
  // And the jailer refuses to launch it.
  jailer::v1::Request req;
  req.mutable_create_slot()->set_slot(7);
  ASSERT_TRUE(Run(jailer_->Call(req)));
  jailer::v1::Request launch;
  launch.mutable_launch()->set_slot(7);
  launch.mutable_launch()->set_mode(jailer::v1::INCOMING_DEFER);
  launch.mutable_launch()->set_template_name(copy_);
  launch.mutable_launch()->set_cpu_model("Nehalem");
  launch.mutable_launch()->set_accelerator("tcg");
  auto lr = Run(jailer_->Call(launch));
  ASSERT_TRUE(lr);
  EXPECT_FALSE(lr->response.ok());
  EXPECT_NE(lr->response.error().find("manifest"), std::string::npos) << lr->response.error();
  jailer::v1::Request destroy;
  destroy.mutable_destroy_slot()->set_slot(7);
  EXPECT_TRUE(Run(jailer_->Call(destroy)));
  EXPECT_TRUE(Netns(env_.netns_prefix).empty());
}

class WarmPoolTest : public GuestTest {
 protected:
  vmhost::VmHostConfig Config() override {
    auto c = GuestTest::Config();
    c.netns_pool = 1;
    c.prestart_pool = 1;
    c.warm_pool = 1;
    return c;
  }
};

TEST_F(WarmPoolTest, HandsOutWarmSandboxesAndRefills) {
  ASSERT_TRUE(Run(manager_->WaitPoolsFull(240s), 300s));
  auto s = manager_->Stats();
  EXPECT_EQ(s.warm, 1u);
  EXPECT_EQ(s.prestarted, 1u);
  EXPECT_EQ(s.netns_ready, 1u);
  auto warm = CreateOrDie();
  ASSERT_TRUE(warm);
  EXPECT_EQ(warm->path(), vmhost::CreatePath::kWarm);
  EXPECT_EQ(CdpEvaluate(*warm, "1 + 1"), "2");
  // The refill restores the next warm one from the pre-started QEMU, then pre-starts another.
  ASSERT_TRUE(Run(manager_->WaitPoolsFull(240s), 300s)) << "pools did not refill";
  auto next = CreateOrDie();
  ASSERT_TRUE(next);
  EXPECT_EQ(next->path(), vmhost::CreatePath::kWarm);
  EXPECT_NE(next->slot(), warm->slot());
  // The clock of a sandbox that waited in the pool is set at hand-out.
  double guest = std::stod(Exec(*next, "date +%s.%N"));
  EXPECT_NEAR(guest, static_cast<double>(std::time(nullptr)), 2.0);
}

TEST_F(WarmPoolTest, ShutdownDuringARefillDoesNotWaitForTheRefillTimer) {
  ASSERT_TRUE(Run(manager_->WaitPoolsFull(240s), 300s));
  auto warm = CreateOrDie();
  ASSERT_TRUE(warm);
  // The refill takes the pre-started QEMU to restore the next warm one: it is mid-step.
  ASSERT_TRUE(WaitUntil([&] { return manager_->Stats().prestarted == 0; }, 30s)) << "the refill did not start";
  auto t0 = std::chrono::steady_clock::now();
  RunVoid(manager_->Shutdown(), 120s);
  auto took = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - t0);
  // The step itself (a restore and a browser refresh) ends in seconds; the idle refill timer is 60 s.
  EXPECT_LT(took.count(), 40) << "Shutdown waited for the refill loop's idle timer";
  EXPECT_TRUE(Netns(env_.netns_prefix).empty());
}

class RefreshTurnTest : public GuestTest {
 protected:
  vmhost::VmHostConfig Config() override {
    auto c = GuestTest::Config();
    c.max_concurrent_refreshes = 1;
    return c;
  }
};

// Browser refreshes after hand-outs take turns: under emulation each is seconds of CPU, and 16
// run at once all outlasted their deadlines. The rest wait (still refreshing, behind the gate),
// in order; one destroyed while it waits passes its turn on the moment it gets it, and a shutdown
// does not wait for the line.
TEST_F(RefreshTurnTest, BrowserRefreshesTakeTurns) {
  auto a = CreateOrDie(/*wait_browser=*/false);
  auto b = CreateOrDie(/*wait_browser=*/false);
  auto c = CreateOrDie(/*wait_browser=*/false);
  ASSERT_TRUE(a && b && c);
  auto st = manager_->Stats();
  EXPECT_EQ(st.refreshes_running, 1u);
  EXPECT_EQ(st.refreshes_waiting, 2u);
  EXPECT_TRUE(a->browser_refreshing() && b->browser_refreshing() && c->browser_refreshing());
  ASSERT_TRUE(Run(manager_->Destroy(c->id()), 60s));
  auto fresh_a = Run(manager_->WaitBrowserFresh(a, 180s), 200s);
  ASSERT_TRUE(fresh_a) << fresh_a.error().message;
  EXPECT_TRUE(b->browser_refreshing()) << "the second refresh ended with the first";
  auto fresh_b = Run(manager_->WaitBrowserFresh(b, 180s), 200s);
  ASSERT_TRUE(fresh_b) << fresh_b.error().message;
  EXPECT_EQ(CdpEvaluate(*b, "1 + 1"), "2");
  ASSERT_TRUE(WaitUntil([&] { return manager_->Stats().refreshes_running == 0; }, 30s))
      << "the destroyed sandbox's turn was not given back";
  EXPECT_EQ(manager_->Stats().refreshes_waiting, 0u);

  // A shutdown with refreshes in line ends them all.
  auto d = CreateOrDie(/*wait_browser=*/false);
  auto e = CreateOrDie(/*wait_browser=*/false);
  ASSERT_TRUE(d && e);
  EXPECT_EQ(manager_->Stats().refreshes_waiting, 1u);
  auto t0 = std::chrono::steady_clock::now();
  RunVoid(manager_->Shutdown(), 120s);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  auto end = manager_->Stats();
  EXPECT_EQ(end.refreshes_running, 0u);
  EXPECT_EQ(end.refreshes_waiting, 0u);
  EXPECT_TRUE(Netns(env_.netns_prefix).empty());
}

class PrestartPoolTest : public GuestTest {
 protected:
  vmhost::VmHostConfig Config() override {
    auto c = GuestTest::Config();
    c.netns_pool = 1;
    c.prestart_pool = 1;
    return c;
  }
};

TEST_F(PrestartPoolTest, RestoresIntoAPrestartedQemu) {
  ASSERT_TRUE(Run(manager_->WaitPoolsFull(120s), 150s));
  EXPECT_EQ(manager_->Stats().prestarted, 1u);
  auto sb = CreateOrDie();
  ASSERT_TRUE(sb);
  EXPECT_EQ(sb->path(), vmhost::CreatePath::kPrestarted);
  EXPECT_EQ(CdpEvaluate(*sb, "2 + 2"), "4");
  ASSERT_TRUE(Run(manager_->WaitPoolsFull(120s), 150s));
  EXPECT_EQ(manager_->Stats().prestarted, 1u);
}

}  // namespace
}  // namespace deskbox::testing

namespace deskbox::testing {
namespace {

// The privileged helper's answers to bad requests: each refused with a message naming the
// cause, and nothing left behind.
class JailerRequestTest : public GuestTest {
 protected:
  jailer::v1::Response Call(jailer::v1::Request req) {
    auto r = Run(jailer_->Call(std::move(req)));
    EXPECT_TRUE(r) << r.error();
    return r ? r->response : jailer::v1::Response{};
  }
  jailer::v1::Request Launch(uint32_t slot, const std::string& tpl, const std::string& accel = "tcg") {
    jailer::v1::Request req;
    auto* l = req.mutable_launch();
    l->set_slot(slot);
    l->set_mode(jailer::v1::INCOMING_DEFER);
    l->set_template_name(tpl);
    l->set_cpu_model(manager_->manifest().cpu_model());
    l->set_accelerator(accel);
    return req;
  }
  jailer::v1::Request Slot(uint32_t slot, bool create) {
    jailer::v1::Request req;
    if (create) req.mutable_create_slot()->set_slot(slot);
    else req.mutable_destroy_slot()->set_slot(slot);
    return req;
  }
};

TEST_F(JailerRequestTest, RefusesBadRequestsWithTheCause) {
  auto r = Call(Launch(3, env_.template_name));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("no network"), std::string::npos) << r.error();
  ASSERT_TRUE(Call(Slot(3, true)).ok());
  for (const char* bad : {"../templates", "a/b", "", ".."}) {
    r = Call(Launch(3, bad));
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().find("bad template name"), std::string::npos) << r.error();
  }
  r = Call(Launch(3, "no-such-template"));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("no-such-template"), std::string::npos) << r.error();
  auto wrong_cpu = Launch(3, env_.template_name);
  wrong_cpu.mutable_launch()->set_cpu_model("qemu64");
  r = Call(wrong_cpu);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("-cpu"), std::string::npos) << r.error();
  for (const char* bad : {"Nehalem,rdrand=on", "Nehalem -S", "Nehalem,,+rdrand"}) {
    auto bad_cpu = Launch(3, env_.template_name);
    bad_cpu.mutable_launch()->set_cpu_model(bad);
    r = Call(bad_cpu);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().find("bad cpu model"), std::string::npos) << r.error();
  }
  r = Call(Slot(100000, true));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("out of range"), std::string::npos) << r.error();
  jailer::v1::Request empty;
  r = Call(empty);
  EXPECT_FALSE(r.ok());
  ASSERT_TRUE(Call(Slot(3, false)).ok());
  EXPECT_TRUE(Netns(env_.netns_prefix).empty());
}

// A template copy (big files hard-linked) sealed with a changed manifest.
std::string SealedCopy(const GuestEnv& env, const std::string& tag,
                       const std::function<void(vmhost::v1::TemplateManifest&, const std::string&)>& change) {
  std::string name = tag + "-" + std::to_string(::getpid());
  std::string src = env.cache_dir + "/templates/" + env.template_name;
  std::string dst = env.cache_dir + "/templates/" + name;
  std::filesystem::remove_all(dst);
  std::filesystem::create_directories(dst);
  for (const char* f : {"disk.img", "ram"}) std::filesystem::create_hard_link(src + "/" + f, dst + "/" + f);
  std::filesystem::copy_file(src + "/state", dst + "/state");
  auto m = *vmhost::OpenTemplate(src, vmhost::VerifyMode::kQuick);
  m.clear_files();
  for (const char* f : {"disk.img", "ram", "state"}) m.add_files()->set_name(f);
  change(m, dst);
  EXPECT_TRUE(vmhost::SealTemplate(dst, m));
  return name;
}

TEST_F(JailerRequestTest, ShortRamFileIsRefused) {
  // A manifest sealed over a RAM file shorter than the guest's memory: QEMU would map it and the
  // guest would fault later; the check refuses it up front.
  std::string name = SealedCopy(env_, "short-ram", [](vmhost::v1::TemplateManifest&, const std::string& dir) {
    std::filesystem::remove(dir + "/ram");
    std::ofstream(dir + "/ram") << std::string(1 << 20, '\0');
  });
  ASSERT_TRUE(Call(Slot(4, true)).ok());
  auto r = Call(Launch(4, name));
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.error().find("MiB of RAM"), std::string::npos) << r.error();
  ASSERT_TRUE(Call(Slot(4, false)).ok());
  std::filesystem::remove_all(env_.cache_dir + "/templates/" + name);
}

TEST_F(JailerRequestTest, QemuThatCannotStartIsReportedAndCleanedUp) {
  // A template whose recorded CPU model QEMU does not know: the jailer's checks pass (the request
  // matches the manifest), QEMU exits at start, and its own message comes back.
  std::string name = SealedCopy(env_, "bad-cpu", [](vmhost::v1::TemplateManifest& m, const std::string&) {
    m.set_cpu_model("NoSuchCpuModel");
  });
  ASSERT_TRUE(Call(Slot(4, true)).ok());
  auto req = Launch(4, name);
  req.mutable_launch()->set_cpu_model("NoSuchCpuModel");
  auto r = Run(jailer_->Call(req));
  ASSERT_TRUE(r);
  if (!r->response.ok()) {
    // QEMU died before its monitor answered: the jailer passes on QEMU's own words and has
    // already released the slot's cgroup.
    EXPECT_NE(r->response.error().find("NoSuchCpuModel"), std::string::npos) << r->response.error();
    EXPECT_FALSE(CgroupExists(env_.cgroup_name, 4, env_.netns_prefix)) << "cgroup left behind";
  } else {
    // The monitor greeted first; the QEMU is gone by the time it is asked anything.
    ASSERT_EQ(r->fds.size(), 3u);
    vmhost::QmpClient qmp(vmhost::QmpClient::Socket(*io_, boost::asio::local::stream_protocol(),
                                                     r->fds[0].release()));
    bool failed = Run([&]() -> asio::awaitable<bool> {
      auto hs = co_await qmp.Handshake(10s);
      if (!hs) co_return true;
      auto st = co_await qmp.Execute("query-status", nlohmann::json::object(), 10s);
      co_return !st.has_value();
    }());
    EXPECT_TRUE(failed) << "a QEMU with an unknown CPU model answered QMP";
  }
  ASSERT_TRUE(Call(Slot(4, false)).ok());
  EXPECT_FALSE(CgroupExists(env_.cgroup_name, 4, env_.netns_prefix)) << "cgroup left behind";
  EXPECT_TRUE(Netns(env_.netns_prefix).empty());
  EXPECT_FALSE(std::filesystem::exists(env_.state_dir + "/slots/4"));
  EXPECT_TRUE(Run(manager_->WaitPoolsFull(1s)));  // the manager is untouched
  std::filesystem::remove_all(env_.cache_dir + "/templates/" + name);
}

}  // namespace
}  // namespace deskbox::testing
