#include "vmhost/template_builder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <ctime>
#include <filesystem>
#include <fmt/format.h>

#include "common/files.h"
#include "async_sleep.h"
#include "common/log.h"
#include "common/process.h"
#include "common/sha256.h"
#include "vmhost/agent_client.h"
#include "vmhost/qemu_command.h"
#include "vmhost/qmp.h"
#include "vmhost/template.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using nlohmann::json;
constexpr char kTemplateLog[] = "template";

std::string QemuVersion(const std::string& binary) {
  auto r = RunCommand({binary, "--version"}, {}, 10s);
  if (!r || !r->ok()) return "unknown";
  // "QEMU emulator version 10.0.2 (Debian ...)"
  auto pos = r->output.find("version ");
  if (pos == std::string::npos) return "unknown";
  auto end = r->output.find_first_of(" \n", pos + 8);
  return r->output.substr(pos + 8, end - pos - 8);
}

std::string TemplateDirName(const TemplateBuildOptions& o, const std::string& qemu_version) {
  std::string recipe = fmt::format("v1|{}|{}|{}x{}|{}|{}|{}|{}", o.image_name, qemu_version,
                                   o.screen_width, o.screen_height, o.smp, o.memory_mib,
                                   o.cpu_model, o.tb_size_mib);
  auto d = Sha256(recipe);
  return fmt::format("{}@{}", o.name, ToHex(std::span(d.data(), 8)));
}

namespace {


struct BootedVm {
  std::unique_ptr<QmpClient> qmp;
  std::unique_ptr<AgentClient> agent;
  agent::v1::ReadyReport report;
};

asio::awaitable<std::expected<void, std::string>> DestroySlot(Jailer& j, uint32_t slot) {
  jailer::v1::Request req;
  req.mutable_destroy_slot()->set_slot(slot);
  auto r = co_await j.Call(std::move(req));
  if (!r) co_return std::unexpected(r.error());
  if (!r->response.ok()) co_return std::unexpected(r->response.error());
  co_return std::expected<void, std::string>{};
}

// Asks the agent until it reports the desktop ready and the guest settled (true), or until
// `deadline` (false). `report` keeps the last report.
asio::awaitable<std::expected<bool, std::string>> WaitDesktopSettled(AgentClient& agent,
                                                                     std::chrono::steady_clock::time_point deadline,
                                                                     agent::v1::ReadyReport& report) {
  while (std::chrono::steady_clock::now() < deadline) {
    agent::v1::Request ready;
    ready.mutable_ready()->set_timeout_ms(20000);
    ready.mutable_ready()->set_require_settled(true);
    auto rr = co_await agent.Call(std::move(ready), 40s);
    if (!rr) co_return std::unexpected("agent ready: " + rr.error().message);
    report = rr->ready();
    if (report.ready()) co_return true;
    log::Info(kTemplateLog, "not ready yet: x={} cdp={} paint={} settled={} idle={:.2f}", report.x_ready(),
              report.cdp_ready(), report.first_paint(), report.settled(), report.idle_fraction());
  }
  co_return false;
}

// One boot attempt: returns the VM once the agent reports ready and settled.
asio::awaitable<std::expected<BootedVm, std::string>> BootOnce(Jailer& jailer,
                                                               const TemplateBuildOptions& o,
                                                               const std::string& accel,
                                                               const std::string& staging) {
  auto ex = co_await asio::this_coro::executor;
  jailer::v1::Request create;
  create.mutable_create_slot()->set_slot(o.slot);
  auto c = co_await jailer.Call(std::move(create));
  if (!c || !c->response.ok()) co_return std::unexpected("network slot: " + (c ? c->response.error() : c.error()));
  jailer::v1::Request req;
  auto* l = req.mutable_launch();
  l->set_slot(o.slot);
  l->set_mode(jailer::v1::BOOT_TEMPLATE);
  l->set_image_name(o.image_name);
  l->set_staging_name(staging);
  l->set_memory_mib(o.memory_mib);
  l->set_smp(o.smp);
  l->set_cpu_model(o.cpu_model);
  l->set_accelerator(accel);
  l->set_tb_size_mib(o.tb_size_mib);
  l->set_kernel_append(fmt::format("deskbox.screen={}x{}", o.screen_width, o.screen_height));
  auto r = co_await jailer.Call(std::move(req));
  if (!r) co_return std::unexpected(r.error());
  if (!r->response.ok()) co_return std::unexpected(r->response.error());
  BootedVm vm;
  vm.qmp = std::make_unique<QmpClient>(QmpClient::Socket(ex, asio::local::stream_protocol(), r->fds[0].release()));
  vm.agent = std::make_unique<AgentClient>(AgentClient::Socket(ex, asio::local::stream_protocol(), r->fds[1].release()));
  auto hs = co_await vm.qmp->Handshake(10s);
  if (!hs) co_return std::unexpected("QMP: " + hs.error().message);
  auto deadline = std::chrono::steady_clock::now() + o.boot_timeout;
  // The agent answers once the guest has booted far enough to start it.
  auto agent_deadline = std::min(deadline, std::chrono::steady_clock::now() + o.agent_timeout);
  bool pinged = false;
  while (std::chrono::steady_clock::now() < agent_deadline && !pinged) {
    agent::v1::Request ping;
    ping.mutable_ping();
    auto p = co_await vm.agent->Call(std::move(ping), 5s);
    if (p) pinged = true;
    else if (p.error().code == AgentError::Code::kClosed || p.error().code == AgentError::Code::kProtocol)
      co_return std::unexpected("agent channel: " + p.error().message);
  }
  if (!pinged)
    co_return std::unexpected(fmt::format("the guest agent did not answer within {} s",
                                          std::min(o.agent_timeout, o.boot_timeout).count()));
  log::Info(kTemplateLog, "agent answered; waiting for the desktop to be ready and idle");
  auto settled = co_await WaitDesktopSettled(*vm.agent, deadline, vm.report);
  if (!settled) co_return std::unexpected(settled.error());
  if (*settled) co_return vm;
  co_return std::unexpected(fmt::format(
      "the desktop was not ready within {} s (x={} cdp={} paint={} settled={})", o.boot_timeout.count(),
      vm.report.x_ready(), vm.report.cdp_ready(), vm.report.first_paint(), vm.report.settled()));
}

// Kills the browser's renderers (the guest's prepare-template: every restore restarts them, so
// the snapshot need not hold any) and waits until the guest is idle again.
asio::awaitable<std::expected<void, std::string>> PrepareForSnapshot(BootedVm& vm, const TemplateBuildOptions& o) {
  agent::v1::Request req;
  req.mutable_exec()->add_argv("/usr/lib/deskbox/prepare-template");
  req.mutable_exec()->set_timeout_s(90);
  auto r = co_await vm.agent->Call(std::move(req), 100s);
  if (!r) co_return std::unexpected("prepare-template: " + r.error().message);
  if (r->exec().exit_code() != 0)
    co_return std::unexpected(fmt::format("prepare-template exited {}: {}", r->exec().exit_code(),
                                          r->exec().stderr().substr(0, 300)));
  // The boot's report stays the one the manifest records.
  agent::v1::ReadyReport after;
  auto settled = co_await WaitDesktopSettled(*vm.agent, std::chrono::steady_clock::now() + o.boot_timeout, after);
  if (!settled) co_return std::unexpected(settled.error());
  if (!*settled) co_return std::unexpected("the guest did not settle after prepare-template");
  co_return std::expected<void, std::string>{};
}

asio::awaitable<std::expected<void, std::string>> Snapshot(BootedVm& vm, const std::string& staging_dir) {
  auto stop = co_await vm.qmp->Execute("stop");
  if (!stop) co_return std::unexpected("stop: " + stop.error().message);
  auto caps = co_await vm.qmp->Execute(
      "migrate-set-capabilities",
      IgnoreSharedCapability());
  if (!caps) co_return std::unexpected("migrate-set-capabilities: " + caps.error().message);
  auto mig = co_await vm.qmp->Execute("migrate", UriArgument("file:" + staging_dir + "/" + kStateFile));
  if (!mig) co_return std::unexpected("migrate: " + mig.error().message);
  for (int i = 0; i < 6000; ++i) {
    auto q = co_await vm.qmp->Execute("query-migrate");
    if (!q) co_return std::unexpected("query-migrate: " + q.error().message);
    std::string status = q->value("status", "");
    if (status == "completed") {
      (void)co_await vm.qmp->Execute("quit", json::object(), 5s);
      co_return std::expected<void, std::string>{};
    }
    if (status == "failed" || status == "cancelled")
      co_return std::unexpected("snapshot migration " + status + ": " + q->value("error-desc", ""));
    co_await Sleep(10ms);
  }
  co_return std::unexpected(std::string("snapshot migration did not finish within 60 s"));
}

}  // namespace

asio::awaitable<std::expected<std::string, std::string>> BuildTemplate(Jailer& jailer,
                                                                       TemplateBuildOptions o) {
  if (!IsSafeName(o.image_name) || !IsSafeName(o.name))
    co_return std::unexpected(std::string("bad image or template name"));
  std::string qemu_version = QemuVersion();
  std::string dir_name = TemplateDirName(o, qemu_version);
  std::string templates = o.cache_dir + "/templates";
  std::string final_dir = templates + "/" + dir_name;
  if (auto m = OpenTemplate(final_dir, VerifyMode::kQuick)) {
    log::Info(kTemplateLog, "template {} exists", final_dir);
    co_return dir_name;
  } else if (m.error().code != TemplateError::Code::kNotFound) {
    log::Warn(kTemplateLog, "existing {} is invalid ({}); rebuilding", final_dir, m.error().message);
    (void)RemoveTree(final_dir);
  } else if (::access(final_dir.c_str(), F_OK) == 0) {
    (void)RemoveTree(final_dir);  // a directory without a manifest is an interrupted build
  }
  // Leftovers of interrupted builds.
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(templates, ec))
    if (e.path().filename().string().starts_with(".staging-")) (void)RemoveTree(e.path().string());

  std::string accel = ResolveAcceleratorOnHost(o.accelerator);
  std::string last_error;
  for (int attempt = 1; attempt <= o.attempts; ++attempt) {
    uint8_t rnd[4];
    RandomBytes(rnd);
    std::string staging = ".staging-" + dir_name.substr(dir_name.find('@') + 1) + "-" + ToHex(rnd);
    std::string staging_dir = templates + "/" + staging;
    auto t0 = std::chrono::steady_clock::now();
    log::Info(kTemplateLog, "booting image {} ({} MiB, {} vCPU, -cpu {}, {}), attempt {}/{}", o.image_name,
              o.memory_mib, o.smp, o.cpu_model, accel, attempt, o.attempts);
    auto vm = co_await BootOnce(jailer, o, accel, staging);
    std::expected<void, std::string> snap;
    if (vm) {
      auto booted = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      log::Info(kTemplateLog, "desktop ready after {:.1f} s (chromium {}), snapshotting", booted,
                vm->report.chromium_version());
      auto prepared = co_await PrepareForSnapshot(*vm, o);
      snap = prepared ? co_await Snapshot(*vm, staging_dir) : std::unexpected(prepared.error());
    }
    (void)co_await DestroySlot(jailer, o.slot);  // QEMU is gone after this
    if (vm && snap) {
      // Hand the files to root, seal them, and publish the directory atomically.
      (void)RunCommand({"chown", "-R", "0:0", staging_dir});
      (void)RunCommand({"sync", "-f", staging_dir + "/" + kRamFile});
      v1::TemplateManifest m;
      m.set_name(o.name);
      m.set_key(dir_name.substr(dir_name.find('@') + 1));
      m.set_image_hash(o.image_name);
      m.set_created_unix_s(std::time(nullptr));
      m.set_qemu_version(qemu_version);
      m.set_accelerator(accel);
      m.set_cpu_model(o.cpu_model);
      m.set_smp(o.smp);
      m.set_memory_mib(o.memory_mib);
      m.set_screen_width(vm->report.screen_width() ? vm->report.screen_width() : o.screen_width);
      m.set_screen_height(vm->report.screen_height() ? vm->report.screen_height() : o.screen_height);
      m.set_kernel_release(vm->report.kernel_release());
      m.set_chromium_version(vm->report.chromium_version());
      m.set_tb_size_mib(o.tb_size_mib);
      for (const char* f : {kDiskFile, kRamFile, kStateFile}) m.add_files()->set_name(f);
      auto sealed = SealTemplate(staging_dir, m);
      if (!sealed) {
        (void)RemoveTree(staging_dir);
        co_return std::unexpected("sealing the template: " + sealed.error().message);
      }
      ::chmod(staging_dir.c_str(), 0555);
      if (::rename(staging_dir.c_str(), final_dir.c_str()) != 0) {
        std::string err = ErrnoString(errno);
        (void)RemoveTree(staging_dir);
        co_return std::unexpected("publishing the template: " + err);
      }
      log::Info(kTemplateLog, "template ready: {}", final_dir);
      co_return dir_name;
    }
    last_error = vm ? snap.error() : vm.error();
    log::Warn(kTemplateLog, "attempt {} failed: {}", attempt, last_error);
    (void)RemoveTree(staging_dir);
  }
  co_return std::unexpected(fmt::format("template build failed after {} attempts: {}", o.attempts, last_error));
}

}  // namespace deskbox::vmhost
