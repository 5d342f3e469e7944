// Restore benchmark: create → (RFB banner and CDP /json/version answer) for each create path,
// beside a full-stream restore and a cold boot measured in the same run, with ratios; idle PSS
// and CPU per sandbox; how many idle sandboxes stay alive and answering.
//
//   restore_bench [--quick] [--runs N] [--alive N] [--steady-minutes M] [--steady-mark-mib N]
//                 [--only PART[,PART…]] [--out FILE]
// --quick: 3 runs per path (2 full-stream), one cold boot, 3 sandboxes for the alive check, no
//          window of the idle trimming (what CI runs: its budget; guest tests cover the loop).
// --steady-minutes: how long the idle sandboxes run with the manager's own idle trimming (60 s
//          idle, trimmed again past the mark), PSS sampled every 30 s (default 10; 0: not measured).
// --steady-mark-mib: the mark for that window (default: deskboxd's default, VmHostConfig's).
// --only: measure only these parts (warm, prestarted, nothing, full, boot, idle); ratios need their
//         baselines, so they are printed only when both sides were measured.
// --out: the printed figures also as JSON in FILE (scripts/long-run).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string_view>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <numeric>
#include <sstream>
#include <thread>
#include <utility>

#include "common/files.h"
#include "common/process.h"
#include "common/slot_network.h"
#include "common/smaps.h"
#include "test_host.h"
#include "vmhost/template.h"

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace deskbox;
using deskbox::testing::TestHost;
using Clock = std::chrono::steady_clock;

namespace {

struct Series {
  std::vector<double> ms;     // create -> RFB + CDP answer
  std::vector<double> fresh;  // create -> every page reloaded in a new renderer and running script
  Series Fresh() const { return Series{fresh, {}}; }
  double Pct(double p) const {
    if (ms.empty()) return 0;
    auto v = ms;
    std::sort(v.begin(), v.end());
    size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * (v.size() - 1) + 0.5));
    return v[i];
  }
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Host CPU idle fraction over `window`, from /proc/stat.
double HostIdle(std::chrono::milliseconds window) {
  auto sample = [] {
    auto s = ReadFile("/proc/stat", 1 << 16).value_or("");
    std::istringstream in(s.substr(0, s.find('\n')));
    std::string cpu;
    uint64_t v, total = 0, idle = 0;
    in >> cpu;
    for (int i = 0; in >> v; ++i) {
      total += v;
      if (i == 3 || i == 4) idle += v;  // idle + iowait
    }
    return std::pair{total, idle};
  };
  auto [t0, i0] = sample();
  std::this_thread::sleep_for(window);
  auto [t1, i1] = sample();
  return t1 > t0 ? static_cast<double>(i1 - i0) / static_cast<double>(t1 - t0) : 1.0;
}

// Each timed create starts on a quiet host: the previous run's guests (just restored, or a pool
// refill) burn CPU for a while under emulation; a production host has cores to spare for them.
void WaitHostQuiet(TestHost& host) {
  auto deadline = Clock::now() + 120s;
  while (Clock::now() < deadline) {
    host.io().poll();
    if (HostIdle(1000ms) >= 0.8) return;
  }
  std::fprintf(stderr, "  (host did not go quiet within 120 s)\n");
}

struct BenchFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Unwinds to main so that every sandbox and the helper are torn down.
[[noreturn]] void Die(const std::string& m) { throw BenchFailure(m); }

// Under TCG: how full the translation cache is and how often it was flushed since QEMU started
// (a flush throws away all translated guest code, which then has to be translated again).
std::string TranslationCache(TestHost& host, vmhost::Sandbox& sb) {
  auto r = host.Run(sb.qmp()->Execute("human-monitor-command", nlohmann::json{{"command-line", "info jit"}}), 10s);
  if (!r || !*r || !(*r)->is_string()) return "";
  std::string text = (*r)->get<std::string>();
  auto field = [&](const std::string& name) -> std::string {
    auto p = text.find(name);
    if (p == std::string::npos) return "";
    p = text.find_first_not_of(' ', p + name.size());
    return text.substr(p, text.find_first_of("\r\n", p) - p);
  };
  std::string size = field("gen code size"), flushes = field("TB flush count");
  auto slash = size.find('/');
  if (slash == std::string::npos || flushes.empty()) return "";
  return fmt::format("; translation cache {:.0f} of {:.0f} MiB, {} flushes",
                     std::strtod(size.c_str(), nullptr) / 1048576.0,
                     std::strtod(size.c_str() + slash + 1, nullptr) / 1048576.0, flushes);
}

// Times create → services answering for `runs` creates with the given pools.
Series MeasureCreates(TestHost& host, vmhost::VmHostConfig cfg, int runs, const char* label) {
  vmhost::SandboxManager m(host.io().get_executor(), host.jailer(), cfg);
  if (auto s = m.Start(); !s) Die(s.error().message);
  Series series;
  for (int i = 0; i < runs; ++i) {
    if (!host.Run(m.WaitPoolsFull(300s), 320s).value_or(false)) Die(std::string(label) + ": pools did not fill");
    WaitHostQuiet(host);
    auto t0 = Clock::now();
    auto sb = host.Run(m.Create(), 300s);
    if (!sb || !*sb) Die(std::string(label) + ": create failed: " + (sb ? sb->error().message : "timeout"));
    auto t1 = Clock::now();
    auto ready = host.Run(m.WaitGuestServices((**sb)->slot(), 60s), 90s);
    if (!ready || !*ready) Die(std::string(label) + ": services did not answer");
    auto t2 = Clock::now();
    auto fresh = host.Run(m.WaitBrowserFresh(**sb, 180s), 200s);
    if (!fresh || !*fresh) Die(std::string(label) + ": the browser did not reload its pages");
    auto t3 = Clock::now();
    series.ms.push_back(Ms(t2 - t0));
    series.fresh.push_back(Ms(t3 - t0));
    std::string cache = TranslationCache(host, ***sb);  // after the clock stopped: it asks QEMU
    std::fprintf(stderr,
                 "  %s run %d: %.1f ms (%s; create %.1f ms, then RFB + CDP answered in %.1f ms; pages fresh at "
                 "%.1f ms%s)\n",
                 label, i + 1, series.ms.back(), std::string(vmhost::ToString((**sb)->path())).c_str(), Ms(t1 - t0),
                 Ms(t2 - t1), series.fresh.back(), cache.c_str());
    host.Run(m.Destroy((**sb)->id()), 60s);
  }
  host.Run([&]() -> asio::awaitable<bool> { co_await m.Shutdown(); co_return true; }(), 120s);
  return series;
}

// Makes a template copy whose state file is a full migration stream (RAM included).
std::string MakeFullStreamTemplate(TestHost& host) {
  // One left by a run that was killed: its process is gone.
  const std::string prefix = host.env().template_name + "-fullstream-";
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(host.env().cache_dir + "/templates", ec)) {
    std::string n = e.path().filename().string();
    if (!n.starts_with(prefix)) continue;
    std::string pid = n.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (!std::filesystem::exists("/proc/" + pid)) std::filesystem::remove_all(e.path(), ec);
  }
  const auto& env = host.env();
  vmhost::SandboxManager m(host.io().get_executor(), host.jailer(), host.BaseConfig());
  if (auto s = m.Start(); !s) Die(s.error().message);
  auto sb = host.Run(m.Create(), 300s);
  if (!sb || !*sb) Die("full-stream: create failed");
  auto& s = **sb;
  // The stream holds a refreshed browser, as the template's first sandbox had.
  if (auto f = host.Run(m.WaitBrowserFresh(s, 180s), 200s); !f || !*f) Die("full-stream: the browser did not reload");
  std::string slot_file = env.state_dir + "/slots/" + std::to_string(s->slot()) + "/full.state";
  bool ok = host.Run([&]() -> asio::awaitable<bool> {
    if (!co_await s->qmp()->Execute("stop")) co_return false;
    if (!co_await s->qmp()->Execute("migrate", vmhost::UriArgument("file:" + slot_file))) co_return false;
    for (int i = 0; i < 12000; ++i) {
      auto q = co_await s->qmp()->Execute("query-migrate");
      if (!q) co_return false;
      if (q->value("status", "") == "completed") co_return true;
      if (q->value("status", "") == "failed") co_return false;
      asio::steady_timer t(co_await asio::this_coro::executor);
      t.expires_after(10ms);
      co_await t.async_wait(asio::use_awaitable);
    }
    co_return false;
  }(), 300s).value_or(false);
  if (!ok) Die("full-stream: migrate failed");
  std::string name = env.template_name + "-fullstream-" + std::to_string(::getpid());
  std::string src = env.cache_dir + "/templates/" + env.template_name;
  std::string dst = env.cache_dir + "/templates/" + name;
  std::filesystem::create_directories(dst);
  std::filesystem::create_hard_link(src + "/disk.img", dst + "/disk.img");
  std::filesystem::create_hard_link(src + "/ram", dst + "/ram");
  std::filesystem::copy_file(slot_file, dst + "/state");
  host.Run(m.Destroy(s->id()), 60s);
  host.Run([&]() -> asio::awaitable<bool> { co_await m.Shutdown(); co_return true; }(), 120s);
  auto manifest = vmhost::OpenTemplate(src, vmhost::VerifyMode::kQuick);
  auto mf = *manifest;
  mf.clear_files();
  for (const char* f : {"disk.img", "ram", "state"}) mf.add_files()->set_name(f);
  if (auto r = vmhost::SealTemplate(dst, mf); !r) Die("full-stream: " + r.error().message);
  std::fprintf(stderr, "  full-stream state: %.0f MB\n",
               static_cast<double>(std::filesystem::file_size(dst + "/state")) / 1e6);
  return name;
}

// Cold boot of the template's image to RFB + CDP answering.
double MeasureColdBoot(TestHost& host, const vmhost::v1::TemplateManifest& mf) {
  constexpr uint32_t kSlot = 50;
  std::string staging = ".bench-boot-" + std::to_string(::getpid());
  vmhost::VmHostConfig cfg = host.BaseConfig();
  vmhost::SandboxManager probe(host.io().get_executor(), host.jailer(), cfg);
  if (auto s = probe.Start(); !s) Die(s.error().message);
  jailer::v1::Request create;
  create.mutable_create_slot()->set_slot(kSlot);
  host.Run(host.jailer().Call(create), 60s);
  jailer::v1::Request req;
  auto* l = req.mutable_launch();
  l->set_slot(kSlot);
  l->set_mode(jailer::v1::BOOT_TEMPLATE);
  l->set_image_name(mf.image_hash());
  l->set_staging_name(staging);
  l->set_memory_mib(mf.memory_mib());
  l->set_smp(mf.smp());
  l->set_cpu_model(mf.cpu_model());
  l->set_accelerator(probe.accelerator());
  l->set_tb_size_mib(mf.tb_size_mib());
  l->set_kernel_append(fmt::format("deskbox.screen={}x{}", mf.screen_width(), mf.screen_height()));
  auto t0 = Clock::now();
  auto r = host.Run(host.jailer().Call(req), 60s);
  if (!r || !*r || !(*r)->response.ok()) Die("cold boot: launch failed: " + (r && *r ? (*r)->response.error() : ""));
  auto ready = host.Run(probe.WaitGuestServices(kSlot, 400s), 420s);
  double ms = Ms(Clock::now() - t0);
  bool ok = ready && *ready;
  jailer::v1::Request destroy;
  destroy.mutable_destroy_slot()->set_slot(kSlot);
  host.Run(host.jailer().Call(destroy), 60s);
  std::filesystem::remove_all(host.env().cache_dir + "/templates/" + staging);
  if (!ok) Die("cold boot: services did not answer");
  std::fprintf(stderr, "  cold boot: %.0f ms\n", ms);
  return ms;
}

// Where a QEMU's PSS is (KiB): TCG's translation cache (its anonymous rwx code buffer, which a
// KVM guest does not have), the guest RAM mapping of the template's RAM file (pages the guest
// wrote are private copies; the rest is page cache shared by every clone), and the rest.
struct PssParts {
  uint64_t total = 0, code = 0, ram = 0, ram_private = 0;
};

PssParts PssBreakdown(int pid) {
  PssParts parts;
  auto s = ReadFile("/proc/" + std::to_string(pid) + "/smaps", 64 << 20);
  if (!s) return parts;
  for (const auto& m : ParseSmaps(*s)) {
    parts.total += m.pss_kib;
    if (m.perms == "rwxp" && m.anonymous()) parts.code += m.pss_kib;
    if (m.path.ends_with("/ram")) {
      parts.ram += m.pss_kib;
      parts.ram_private += m.anonymous_kib;
    }
  }
  return parts;
}

double CpuSeconds(int pid) {
  auto s = ReadFile("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!s) return 0;
  auto close = s->rfind(')');
  std::vector<std::string> f;
  size_t pos = close + 2;
  while (pos < s->size()) {
    size_t sp = s->find(' ', pos);
    f.push_back(s->substr(pos, sp - pos));
    if (sp == std::string::npos) break;
    pos = sp + 1;
  }
  // fields after ')' start at state (index 0): utime=11, stime=12
  return (std::stod(f[11]) + std::stod(f[12])) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace

int Bench(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return Bench(argc, argv);
  } catch (const BenchFailure& e) {
    std::fprintf(stderr, "restore_bench: %s\n", e.what());
    return 1;
  }
}

int Bench(int argc, char** argv) {
  bool quick = false;
  int runs = 20, alive_target = 16, steady_minutes = 10;
  int steady_mark_mib = static_cast<int>(vmhost::VmHostConfig{}.trim_regrown_mib);
  const std::vector<std::string> kParts = {"warm", "prestarted", "nothing", "full", "boot", "idle"};
  std::vector<std::string> parts = kParts;
  std::string out_path;
  const char* usage =
      "usage: restore_bench [--quick] [--runs N] [--alive N] [--steady-minutes M] [--steady-mark-mib N] "
      "[--only warm,prestarted,nothing,full,boot,idle] [--out FILE]";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") { quick = true; runs = 3; alive_target = 3; steady_minutes = 0; }
    else if (a == "--steady-minutes" && i + 1 < argc) steady_minutes = std::atoi(argv[++i]);
    else if (a == "--steady-mark-mib" && i + 1 < argc) steady_mark_mib = std::atoi(argv[++i]);
    else if (a == "--runs" && i + 1 < argc) runs = std::atoi(argv[++i]);
    else if (a == "--alive" && i + 1 < argc) alive_target = std::atoi(argv[++i]);
    else if (a == "--out" && i + 1 < argc) out_path = argv[++i];
    else if (a == "--only" && i + 1 < argc) {
      parts.clear();
      std::istringstream in(argv[++i]);
      for (std::string p; std::getline(in, p, ',');) {
        if (std::ranges::find(kParts, p) == kParts.end()) Die(std::string("unknown part '") + p + "'; " + usage);
        parts.push_back(p);
      }
    } else Die(usage);
  }
  if (runs < 1 || alive_target < 0 || steady_minutes < 0 || steady_mark_mib < 0) Die(usage);
  auto want = [&](const char* p) { return std::ranges::find(parts, p) != parts.end(); };
  TestHost host;
  if (auto s = host.Start(); !s) Die(s.error());
  auto mf = vmhost::OpenTemplate(host.env().cache_dir + "/templates/" + host.env().template_name,
                                 vmhost::VerifyMode::kQuick);
  if (!mf) Die(mf.error().message);
  std::fprintf(stderr, "template %s (%s, -cpu %s, %lu MiB, %u vCPU)\n", host.env().template_name.c_str(),
               mf->accelerator().c_str(), mf->cpu_model().c_str(), static_cast<unsigned long>(mf->memory_mib()),
               mf->smp());

  auto cfg = host.BaseConfig();
  cfg.max_slots = std::max(8, alive_target + 4);
  auto warm_cfg = cfg;
  warm_cfg.netns_pool = 1;
  warm_cfg.prestart_pool = 1;
  warm_cfg.warm_pool = 1;
  auto pre_cfg = cfg;
  pre_cfg.netns_pool = 1;
  pre_cfg.prestart_pool = 1;
  Series warm, pre, cold, full;
  if (want("warm")) warm = MeasureCreates(host, warm_cfg, runs, "warm");
  if (want("prestarted")) pre = MeasureCreates(host, pre_cfg, runs, "prestarted");
  if (want("nothing")) cold = MeasureCreates(host, cfg, runs, "nothing pooled");

  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() {
      if (!path.empty()) std::filesystem::remove_all(path);
    }
  } full_dir;
  if (want("full")) {
    std::string full_name = MakeFullStreamTemplate(host);
    full_dir.path = host.env().cache_dir + "/templates/" + full_name;
    auto full_cfg = cfg;
    full_cfg.template_name = full_name;
    full_cfg.netns_pool = 1;
    full_cfg.prestart_pool = 1;
    full = MeasureCreates(host, full_cfg, quick ? 2 : std::max(5, runs / 2), "full-stream");
  }

  double boot = want("boot") ? MeasureColdBoot(host, *mf) : 0;
  if (!want("idle")) alive_target = 0;

  // Idle cost and how many stay alive: create them, let them settle, measure, then probe each.
  // Then trim their translation caches (by hand, not after the idle delay, so that both
  // measurements are of the same sandboxes), let them settle again, and measure again.
  auto idle_cfg = cfg;
  idle_cfg.trim_idle_after = 0s;
  vmhost::SandboxManager m(host.io().get_executor(), host.jailer(), idle_cfg);
  if (auto s = m.Start(); !s) Die(s.error().message);
  std::vector<std::shared_ptr<vmhost::Sandbox>> alive;  // empty unless "idle" is measured
  for (int i = 0; i < alive_target; ++i) {
    auto sb = host.Run(m.Create(), 300s);
    if (!sb || !*sb) {
      std::fprintf(stderr, "  alive: create %d failed: %s\n", i + 1, sb ? sb->error().message.c_str() : "timeout");
      break;
    }
    alive.push_back(**sb);
  }
  size_t created = alive.size();
  // Idle means after the reload that a non-warm create starts. Reloads take turns, so the last of
  // N waits for the N-1 before it; a sandbox that failed meanwhile is not measured.
  std::erase_if(alive, [&](const std::shared_ptr<vmhost::Sandbox>& s) {
    auto f = host.Run(m.WaitBrowserFresh(s, std::chrono::seconds(180 + 30 * created)), std::chrono::seconds(200 + 30 * created));
    if (f && *f) return false;
    std::fprintf(stderr, "  alive: sandbox in slot %u did not reload its pages: %s\n", s->slot(),
                 f ? f->error().message.c_str() : "timeout");
    return s->state() != vmhost::SandboxState::kRunning;
  });
  if (!alive.empty()) std::this_thread::sleep_for(quick ? 15s : 30s);
  struct Idle {
    double pss = 0, code = 0, ram = 0, ram_private = 0, cpu = 0;  // MiB and cores, per sandbox
    void Add(const Idle& o, double scale = 1) {
      pss += o.pss * scale;
      code += o.code * scale;
      ram += o.ram * scale;
      ram_private += o.ram_private * scale;
      cpu += o.cpu * scale;
    }
  };
  // The sandboxes' QEMUs' CPU seconds now, and their mean use of a core since then.
  auto cpu_now = [&]() {
    std::vector<double> v;
    for (auto& s : alive) v.push_back(CpuSeconds(s->qemu_pid()));
    return v;
  };
  auto cores_since = [&](const std::vector<double>& cpu0, Clock::time_point t0) {
    double secs = std::chrono::duration<double>(Clock::now() - t0).count(), cores = 0;
    for (size_t i = 0; i < alive.size(); ++i) cores += (CpuSeconds(alive[i]->qemu_pid()) - cpu0[i]) / secs;
    return cores / static_cast<double>(alive.size());
  };
  // PSS split now, averaged over the sandboxes (cpu left 0).
  auto memory_now = [&]() {
    Idle r;
    for (auto& sb : alive) {
      auto parts = PssBreakdown(sb->qemu_pid());
      r.Add(Idle{parts.total / 1024.0, parts.code / 1024.0, parts.ram / 1024.0, parts.ram_private / 1024.0, 0},
            1.0 / static_cast<double>(alive.size()));
    }
    return r;
  };
  // PSS split and CPU over 10 s, averaged over the sandboxes.
  auto measure_idle = [&]() {
    if (alive.empty()) return Idle{};
    auto cpu0 = cpu_now();
    auto t0 = Clock::now();
    std::this_thread::sleep_for(10s);
    Idle r = memory_now();
    r.cpu = cores_since(cpu0, t0);
    return r;
  };
  // How long an idle sandbox takes to answer RFB and CDP again (the readiness probe of a create).
  auto measure_wake = [&]() {
    Series s;
    for (auto& sb : alive) {
      auto t0 = Clock::now();
      auto ok = host.Run(m.WaitGuestServices(sb->slot(), 30s), 40s);
      if (ok && *ok) s.ms.push_back(Ms(Clock::now() - t0));
    }
    return s;
  };
  Idle untrimmed = measure_idle();
  Series wake_untrimmed = measure_wake();
  Idle trimmed;
  Series wake_trimmed;
  size_t trimmable = 0;
  double trim_settle_s = 0;
  if (!alive.empty()) {
    for (auto& sb : alive) {
      auto t = host.Run(m.TrimTranslationCache(sb->id()), 30s);
      trimmable += t && *t && (*t)->trimmable;
    }
    // The trims happen as the vCPUs next idle; then the desktops translate again what they run.
    // All at once here (the idle trimming spreads them out): wait until that is over, i.e. the
    // sandboxes' CPU over 5 s is back within 1.5x of the untrimmed figure (at most 3 minutes).
    auto total_cpu = [&]() {
      double t = 0;
      for (auto& sb : alive) t += CpuSeconds(sb->qemu_pid());
      return t;
    };
    auto trim_at = Clock::now();
    std::string course;
    for (double before = total_cpu(); Clock::now() - trim_at < 180s;) {
      std::this_thread::sleep_for(5s);
      double now = total_cpu(), per_sandbox = (now - before) / 5.0 / static_cast<double>(alive.size());
      before = now;
      course += fmt::format(" {:.1f}%", 100.0 * per_sandbox);
      if (Clock::now() - trim_at >= (quick ? 15s : 30s) && per_sandbox <= 1.5 * untrimmed.cpu + 0.005) break;
    }
    std::fprintf(stderr, "  after the trims, CPU per sandbox every 5 s:%s\n", course.c_str());
    trim_settle_s = std::chrono::duration<double>(Clock::now() - trim_at).count();
    trimmed = measure_idle();
    for (auto& sb : alive) host.Run(m.TrimTranslationCache(sb->id()), 30s);
    std::this_thread::sleep_for(5s);
    wake_trimmed = measure_wake();
  }
  // The idle trimming as deployed, over a window: the manager's own loop (trimmed after 60 s
  // idle, again once the cache has grown back past the mark), which is what keeps an idle
  // sandbox's memory down for longer than the moments after one trim. PSS sampled every 30 s.
  struct Steady {
    Idle mean;
    double pss_min = 0, pss_max = 0;
    int samples = 0;
    uint64_t trims = 0;
  } steady;
  if (!alive.empty() && steady_minutes > 0) {
    uint64_t trims0 = m.Stats().trims_total;
    auto cpu0 = cpu_now();
    auto t0 = Clock::now();
    m.SetIdleTrim(60s, static_cast<uint32_t>(steady_mark_mib));
    for (auto end = t0 + std::chrono::minutes(steady_minutes); Clock::now() < end;) {
      // The manager's loop runs on host.io(), which runs only inside host.Run().
      host.Run([]() -> asio::awaitable<bool> {
        asio::steady_timer t(co_await asio::this_coro::executor);
        t.expires_after(30s);
        co_await t.async_wait(asio::use_awaitable);
        co_return true;
      }(), 60s);
      Idle sample = memory_now();
      steady.pss_min = steady.samples ? std::min(steady.pss_min, sample.pss) : sample.pss;
      steady.pss_max = std::max(steady.pss_max, sample.pss);
      steady.mean.Add(sample);
      ++steady.samples;
    }
    m.SetIdleTrim(0s, 0);
    Idle sum = std::exchange(steady.mean, Idle{});
    steady.mean.Add(sum, 1.0 / std::max(1, steady.samples));
    steady.mean.cpu = cores_since(cpu0, t0);
    steady.trims = m.Stats().trims_total - trims0;
  }
  int answering = 0;
  for (auto& s : alive) {
    bool ok = host.Run([&]() -> asio::awaitable<bool> {
      auto sock = co_await m.ConnectGuest(s->slot(), slot_network::kGuestRfbPort, 5s);
      if (!sock) co_return false;
      std::string banner(12, '\0');
      boost::system::error_code ec;
      co_await asio::async_read(*sock, asio::buffer(banner), asio::redirect_error(asio::use_awaitable, ec));
      if (ec || !banner.starts_with("RFB")) co_return false;
      agent::v1::Request ping;
      ping.mutable_ping();
      auto p = co_await s->agent()->Call(std::move(ping), 5s);
      co_return p.has_value();
    }(), 30s).value_or(false);
    answering += ok;
  }
  host.Run([&]() -> asio::awaitable<bool> { co_await m.Shutdown(); co_return true; }(), 300s);

  size_t n = alive.size();
  std::printf("\nrestore benchmark (%s, %d runs per path, template %s, accelerator %s)\n",
              quick ? "quick" : "full", runs, host.env().template_name.c_str(), mf->accelerator().c_str());
  std::printf("%-34s %10s %10s\n", "create -> RFB + CDP answer", "p50 ms", "p95 ms");
  auto row = [](const char* name, const Series& s) {
    if (!s.ms.empty()) std::printf("%-34s %10.1f %10.1f\n", name, s.Pct(50), s.Pct(95));
  };
  row("warm pool", warm);
  row("pre-started QEMU (restore)", pre);
  row("nothing pooled", cold);
  row("baseline: full-stream restore", full);
  if (boot > 0) std::printf("%-34s %10.1f\n", "baseline: cold boot", boot);
  // What a client that talks to a page first waits for: a restore's pages reload after create.
  if (!warm.ms.empty() || !pre.ms.empty() || !cold.ms.empty() || !full.ms.empty())
    std::printf("%-34s %10s %10s\n", "create -> pages fresh", "p50 ms", "p95 ms");
  row("warm pool", warm.Fresh());
  row("pre-started QEMU (restore)", pre.Fresh());
  row("nothing pooled", cold.Fresh());
  row("baseline: full-stream restore", full.Fresh());
  std::vector<std::string> ratios;
  if (boot > 0 && !warm.ms.empty()) ratios.push_back(fmt::format("cold boot / warm = {:.0f}x", boot / warm.Pct(50)));
  if (!full.ms.empty() && !pre.ms.empty())
    ratios.push_back(fmt::format("full-stream / pre-started = {:.2f}x", full.Pct(50) / pre.Pct(50)));
  if (!full.ms.empty() && !cold.ms.empty())
    ratios.push_back(fmt::format("full-stream / nothing pooled = {:.2f}x", full.Pct(50) / cold.Pct(50)));
  if (!full.ms.empty() && !pre.ms.empty())
    ratios.push_back(fmt::format("pages fresh: full-stream / pre-started = {:.2f}x",
                                 full.Fresh().Pct(50) / pre.Fresh().Pct(50)));
  if (!ratios.empty()) {
    std::string line = "ratios: ";
    for (size_t i = 0; i < ratios.size(); ++i) line += (i ? "; " : "") + ratios[i];
    std::printf("%s\n", line.c_str());
  }
  auto print_idle = [&](const char* what, const Idle& i) {
    std::printf(
        "idle per sandbox, %s (QEMU incl., %zu sandboxes): PSS %.0f MiB, CPU %.1f%% of a core\n",
        what, n, i.pss, 100.0 * i.cpu);
    std::printf(
        "  of it: TCG translation cache %.0f MiB, guest RAM %.0f MiB (%.0f MiB written by the "
        "guest, the rest shared with the other clones), QEMU and the rest %.0f MiB\n",
        i.code, i.ram, i.ram_private, i.pss - i.code - i.ram);
  };
  if (n > 0) {
    print_idle("translation cache as the desktop left it (baseline)", untrimmed);
    print_idle("translation cache trimmed", trimmed);
    std::printf(
        "  trimmed %zu of %zu at once, settled after %.0f s; PSS untrimmed / trimmed = %.2fx, "
        "translation cache %.0f -> %.0f MiB\n",
        trimmable, n, trim_settle_s, trimmed.pss > 0 ? untrimmed.pss / trimmed.pss : 0.0,
        untrimmed.code, trimmed.code);
    std::printf("%-34s %10s %10s\n", "idle sandbox -> RFB + CDP answer", "p50 ms", "p95 ms");
    row("translation cache kept", wake_untrimmed);
    row("right after a trim", wake_trimmed);
  }
  if (steady.samples > 0) {
    print_idle(fmt::format("idle trimming as deployed (mark {} MiB), {} min, mean of {} samples", steady_mark_mib,
                           steady_minutes, steady.samples)
                   .c_str(),
               steady.mean);
    std::printf("  PSS per sandbox over the window %.0f..%.0f MiB; %llu trims (%.1f per sandbox); "
                "PSS untrimmed / as deployed = %.2fx\n",
                steady.pss_min, steady.pss_max, static_cast<unsigned long long>(steady.trims),
                static_cast<double>(steady.trims) / static_cast<double>(n),
                steady.mean.pss > 0 ? untrimmed.pss / steady.mean.pss : 0.0);
  }
  if (alive_target > 0)
    std::printf("alive at once: %d of %zu created answer RFB + agent ping within 5 s (target %d)\n", answering,
                created, alive_target);
  if (!out_path.empty()) {
    auto series = [](const Series& s) {
      return s.ms.empty() ? nlohmann::json(nullptr)
                          : nlohmann::json{{"runs", s.ms.size()}, {"p50_ms", s.Pct(50)}, {"p95_ms", s.Pct(95)},
                                           {"fresh_p50_ms", s.Fresh().Pct(50)}};
    };
    auto idle = [](const Idle& i) {
      return nlohmann::json{{"pss_mib", i.pss},   {"cache_mib", i.code},         {"ram_mib", i.ram},
                            {"ram_written_mib", i.ram_private}, {"cpu_cores", i.cpu}};
    };
    nlohmann::json j = {{"bench", "restore_bench"},
                        {"quick", quick},
                        {"runs", runs},
                        {"parts", parts},
                        {"template", host.env().template_name},
                        {"accelerator", mf->accelerator()},
                        {"warm", series(warm)},
                        {"prestarted", series(pre)},
                        {"nothing_pooled", series(cold)},
                        {"full_stream", series(full)},
                        {"cold_boot_ms", boot},
                        {"ratios", ratios}};
    if (n > 0) {
      j["idle"] = {{"sandboxes", n},
                   {"untrimmed", idle(untrimmed)},
                   {"trimmed", idle(trimmed)},
                   {"trimmable", trimmable},
                   {"trim_settle_s", trim_settle_s},
                   {"wake_untrimmed", series(wake_untrimmed)},
                   {"wake_trimmed", series(wake_trimmed)}};
    }
    if (steady.samples > 0)
      j["steady"] = {{"minutes", steady_minutes}, {"mark_mib", steady_mark_mib}, {"samples", steady.samples},
                     {"mean", idle(steady.mean)},  {"pss_min_mib", steady.pss_min}, {"pss_max_mib", steady.pss_max},
                     {"trims", steady.trims}};
    if (alive_target > 0)
      j["alive"] = {{"target", alive_target}, {"created", created}, {"answering", answering}};
    std::ofstream(out_path) << j.dump(2) << "\n";
    std::printf("figures: %s\n", out_path.c_str());
  }
  return 0;
}
