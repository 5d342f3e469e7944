#include "vmhost/sandbox_manager.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <thread>

#include "async_sleep.h"
#include "manager_names.h"
#include "common/files.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/slot_network.h"
#include "vmhost/devtools_http.h"
#include "vmhost/qemu_command.h"
#include "vmhost/template.h"

namespace deskbox::vmhost {

using manager::kLog;

std::string_view ToString(CreatePath p) {
  switch (p) {
    case CreatePath::kWarm: return "warm";
    case CreatePath::kPrestarted: return "prestarted";
    case CreatePath::kCold: return "cold";
  }
  return "?";
}

using manager::JailerErr;

SandboxManager::SandboxManager(asio::any_io_executor executor, Jailer& jailer, VmHostConfig config)
    : executor_(executor),
      jailer_(jailer),
      config_(std::move(config)),
      slots_(jailer, config_.first_slot, config_.max_slots),
      pools_(PoolTargets{config_.netns_pool, config_.prestart_pool, config_.warm_pool}),
      restorer_(RestoreSettings{.state_file = config_.cache_dir + "/templates/" + config_.template_name + "/" + kStateFile,
                                .restore_timeout = config_.restore_timeout,
                                .ready_timeout = config_.ready_timeout}),
      refill_timer_(executor) {
}

SandboxManager::~SandboxManager() { *alive_ = false; }

std::expected<void, VmError> SandboxManager::Start() {
  auto l = Load();
  if (!l) return l;
  refill_started_ = true;
  asio::co_spawn(executor_, RefillLoop(alive_), asio::detached);
  StartTrimLoop();
  return {};
}

std::expected<void, VmError> SandboxManager::Load() {
  auto m = OpenTemplate(config_.cache_dir + "/templates/" + config_.template_name, VerifyMode::kQuick);
  if (!m) return std::unexpected(VmError{VmError::Code::kNotFound, m.error().message});
  manifest_ = std::move(*m);
  accelerator_ = ResolveAcceleratorOnHost(config_.accelerator);
  refresh_limit_ = config_.max_concurrent_refreshes
                       ? config_.max_concurrent_refreshes
                       : std::max<size_t>(1, std::thread::hardware_concurrency() / std::max<uint32_t>(1, manifest_.smp()));
  log::Info(kLog, "template {} ({} MiB, {} vCPU, -cpu {}), accelerator {}; {} browser refresh(es) at once",
            config_.template_name, manifest_.memory_mib(), manifest_.smp(), manifest_.cpu_model(), accelerator_,
            refresh_limit_);
  started_ = true;
  return {};
}

std::string SandboxManager::NewId() {
  uint8_t b[8];
  RandomBytes(b);
  return "sb-" + ToHex(b);
}

constexpr auto kRefillDelayAfterWarm = std::chrono::milliseconds(1000);

void SandboxManager::KickRefill() { refill_timer_.cancel(); }

asio::awaitable<void> SandboxManager::ReleaseSlot(uint32_t slot) {
  co_await slots_.Release(slot);
  KickRefill();
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Restore(Sandbox& sb) {
  co_return co_await restorer_.Restore(*sb.qmp_, *sb.agent_);
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::HandOut(Sandbox& sb) {
  co_return co_await restorer_.HandOut(*sb.agent_, sb.slot_);
}

asio::awaitable<std::expected<std::map<std::string, UniqueFd>, VmError>> SandboxManager::OpenEgressSockets(
    uint32_t slot) {
  jailer::v1::Request req;
  req.mutable_open_egress_sockets()->set_slot(slot);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) co_return std::unexpected(r.error());
  if (static_cast<int>(r->fds.size()) != r->response.fd_roles_size())
    co_return std::unexpected(JailerErr("egress sockets: roles and descriptors differ"));
  std::map<std::string, UniqueFd> out;
  for (size_t i = 0; i < r->fds.size(); ++i) out[r->response.fd_roles(static_cast<int>(i))] = std::move(r->fds[i]);
  co_return out;
}

asio::awaitable<std::expected<std::vector<UniqueFd>, VmError>> SandboxManager::OpenUplinkSockets(bool ipv6, bool udp,
                                                                                                 unsigned count) {
  jailer::v1::Request req;
  auto* o = req.mutable_open_uplink_sockets();
  o->set_ipv6(ipv6);
  o->set_udp(udp);
  o->set_count(count);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) co_return std::unexpected(r.error());
  co_return std::move(r->fds);
}

void SandboxManager::WatchQemu(const std::shared_ptr<Sandbox>& sb) {
  std::weak_ptr<Sandbox> weak = sb;
  auto alive = alive_;
  sb->pidfd_->async_wait(asio::posix::descriptor_base::wait_read,
                        [this, weak, alive](boost::system::error_code ec) {
                          if (ec || !*alive) return;
                          auto s = weak.lock();
                          if (!s || s->state_ == SandboxState::kStopped) return;
                          asio::co_spawn(executor_, [this, s]() -> asio::awaitable<void> {
                            log::Warn(kLog, "sandbox {} (slot {}): QEMU pid {} exited", s->id_, s->slot_, s->qemu_pid_);
                            s->failure_ = "QEMU exited unexpectedly";
                            co_await Transition(*s, SandboxState::kFailed);
                          }, asio::detached);
                        });
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Transition(Sandbox& sb, SandboxState to) {
  if (!CanTransition(sb.state_, to))
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; cannot become {}", sb.id_,
                                                  ToString(sb.state_), ToString(to))});
  SandboxState from = sb.state_;
  sb.state_ = to;
  if (to == SandboxState::kFailed || to == SandboxState::kStopped) {
    // Release everything on the host at once; a failed sandbox keeps only its record.
    if (sb.qmp_) sb.qmp_->Close();
    if (sb.agent_) sb.agent_->Close();
    if (sb.pidfd_) {
      boost::system::error_code ec;
      sb.pidfd_->close(ec);
    }
    if (from != SandboxState::kFailed) co_await ReleaseSlot(sb.slot_);
    for (auto& w : sb.browser_waiters_) w->cancel();  // they see the state and give up
  }
  if (to == SandboxState::kStopped) sandboxes_.erase(sb.id_);
  if (observer_) observer_(sb, from);
  co_return std::expected<void, VmError>{};
}

asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> SandboxManager::Create() {
  // A restore done for this request (nothing warm) can fail in the guest under emulation — an
  // agent that does not answer in time. Such a VM is thrown away and the restore done once
  // more, in a fresh slot, before the client is told.
  auto alive = alive_;
  bool warm = false;
  auto r = co_await CreateOnce(&warm);
  if (r || warm || !*alive) co_return r;
  auto code = r.error().code;
  if (code != VmError::Code::kTimeout && code != VmError::Code::kGuest && code != VmError::Code::kAgent) co_return r;
  log::Warn(kLog, "create: restore failed ({}); restoring again in another slot", r.error().message);
  co_return co_await CreateOnce(&warm);
}

asio::awaitable<void> SandboxManager::SetPriority(Sandbox& sb, bool background) {
  jailer::v1::Request req;
  req.mutable_set_slot_priority()->set_slot(sb.slot_);
  req.mutable_set_slot_priority()->set_background(background);
  // Best effort: a sandbox at the wrong priority still works.
  if (auto r = co_await CallJailer(jailer_, std::move(req)); !r)
    log::Warn(kLog, "slot {}: priority: {}", sb.slot_, r.error().message);
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::SetCpuLimits(const std::string& id, CpuLimits limits) {
  auto sb = Find(id);
  if (!sb) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
  if (sb->state_ != SandboxState::kRunning && sb->state_ != SandboxState::kPaused && sb->state_ != SandboxState::kCreating)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}", id, ToString(sb->state_))});
  jailer::v1::Request req;
  auto* l = req.mutable_set_slot_limits();
  l->set_slot(sb->slot_);
  l->set_cpu_weight(limits.weight);
  l->set_cpu_max_millis(limits.max_millis);
  if (auto r = co_await CallJailer(jailer_, std::move(req)); !r)
    co_return std::unexpected(VmError{VmError::Code::kQemu, fmt::format("cpu limits: {}", r.error().message)});
  co_return std::expected<void, VmError>{};
}

asio::awaitable<void> SandboxManager::LogGuestState(Sandbox& sb, std::string_view why) {
  if (!sb.agent_) co_return;
  agent::v1::Request req;
  auto* e = req.mutable_exec();
  e->add_argv("/bin/sh");
  e->add_argv("-c");
  e->add_argv("tail -n 15 /run/deskbox/log/chromium.log 2>&1; echo; pgrep -c chromium; cat /proc/loadavg");
  e->set_timeout_s(10);
  auto r = co_await sb.agent_->Call(std::move(req), 15s);
  std::string out = r ? r->exec().stdout().substr(0, 2000) : "agent: " + r.error().message;
  log::Warn(kLog, "slot {}: {}; guest state: {}", sb.slot_, why, out);
}

asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> SandboxManager::CreateOnce(bool* warm) {
  std::shared_ptr<Sandbox> sb;
  CreatePath path;
  if (auto taken = pools_.TakeForClient()) {
    sb = std::move(taken->vm);
    path = taken->path;
  } else {
    auto slot = co_await slots_.Take();
    if (!slot) co_return std::unexpected(slot.error());
    auto p = co_await Prestart(*slot);
    if (!p) {
      co_await ReleaseSlot(*slot);
      co_return std::unexpected(p.error());
    }
    sb = *p;
    path = CreatePath::kCold;
  }
  // A refill restores a guest, which under emulation takes the CPU the hand-out needs: a warm
  // create kicks it once its own guest is handed out.
  if (path != CreatePath::kWarm) KickRefill();
  *warm = path == CreatePath::kWarm;
  // A restore runs at the client's priority; a warm hand-out sets it while the agent answers.
  if (path == CreatePath::kPrestarted) co_await SetPriority(*sb, /*background=*/false);
  sb->id_ = NewId();
  sb->path_ = path;
  sb->created_at_ = std::chrono::system_clock::now();
  sb->state_ = SandboxState::kCreating;
  sandboxes_[sb->id_] = sb;
  WatchQemu(sb);
  auto fail = [&](VmError e) -> asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> {
    if (e.code == VmError::Code::kTimeout || e.code == VmError::Code::kGuest) co_await LogGuestState(*sb, e.message);
    sb->failure_ = e.message;
    if (sb->state_ != SandboxState::kFailed) co_await Transition(*sb, SandboxState::kFailed);
    sandboxes_.erase(sb->id_);  // no client has seen its id
    co_return std::unexpected(std::move(e));
  };
  // While a client waits on a restore, pool refills hold theirs back: under emulation two
  // restores and browser refreshes at once on two cores have starved each other past a minute.
  struct ClientRestore {
    size_t& n;
    bool on;
    ~ClientRestore() { if (on) --n; }
  } client_restore{client_restores_, path != CreatePath::kWarm};
  if (client_restore.on) ++client_restores_;
  auto t_start = std::chrono::steady_clock::now();
  if (path != CreatePath::kWarm) {
    auto r = co_await Restore(*sb);
    if (!r) co_return co_await fail(r.error());
    log::Debug(kLog, "slot {}: restored in {:.0f} ms", sb->slot_,
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start).count());
  }
  auto t_restored = std::chrono::steady_clock::now();
  std::expected<void, VmError> h;
  if (path != CreatePath::kWarm) {
    h = co_await HandOut(*sb);
  } else {
    h = co_await (HandOut(*sb) && SetPriority(*sb, /*background=*/false));
    // The refill restores a guest, which under emulation takes both cores for seconds: the
    // client's first connections to the sandbox it was just given (RFB, CDP, a screenshot) go
    // first. Measured (restore_bench, warm): RFB + CDP answered in 27–93 ms with the refill
    // started at once.
    asio::co_spawn(
        executor_,
        [](SandboxManager* self, std::shared_ptr<bool> alive) -> asio::awaitable<void> {
          co_await Sleep(kRefillDelayAfterWarm);
          if (*alive) self->KickRefill();
        }(this, alive_),
        asio::detached);
  }
  if (!h) co_return co_await fail(h.error());
  log::Debug(kLog, "slot {}: hand-out took {:.0f} ms", sb->slot_,
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_restored).count());
  if (sb->state_ != SandboxState::kCreating)
    co_return std::unexpected(VmError{VmError::Code::kQemu, "sandbox failed while starting: " + sb->failure_});
  co_await Transition(*sb, SandboxState::kRunning);
  // The desktop, the agent and the browser process answer now; the pages reload in new
  // renderers while the client goes on (under emulation that is seconds of a cold translation
  // cache). Whatever talks to a page waits for it: WaitBrowserFresh.
  if (path != CreatePath::kWarm) RefreshInBackground(sb);
  log::Info(kLog, "sandbox {} running in slot {} ({})", sb->id_, sb->slot_, ToString(path));
  co_return sb;
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Destroy(const std::string& id) {
  auto sb = Find(id);
  if (!sb) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
  co_return co_await Transition(*sb, SandboxState::kStopped);
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Pause(const std::string& id) {
  auto sb = Find(id);
  if (!sb) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
  if (!CanTransition(sb->state_, SandboxState::kPaused) || sb->state_ == SandboxState::kCreating)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; only a running sandbox can be paused",
                                                  id, ToString(sb->state_))});
  // Stopped vCPUs would stall a browser refresh still under way into a failure.
  if (auto fresh = co_await WaitBrowserFresh(sb, 3 * config_.ready_timeout); !fresh) co_return fresh;
  if (sb->state_ != SandboxState::kRunning)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; only a running sandbox can be paused", id,
                                                  ToString(sb->state_))});
  auto r = co_await sb->qmp_->Execute("stop");
  if (!r) co_return std::unexpected(VmError{VmError::Code::kQemu, "stop: " + r.error().message});
  co_return co_await Transition(*sb, SandboxState::kPaused);
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Resume(const std::string& id) {
  auto sb = Find(id);
  if (!sb) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
  if (sb->state_ != SandboxState::kPaused)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; only a paused sandbox can be resumed",
                                                  id, ToString(sb->state_))});
  auto r = co_await sb->qmp_->Execute("cont");
  if (!r) co_return std::unexpected(VmError{VmError::Code::kQemu, "cont: " + r.error().message});
  auto t = co_await Transition(*sb, SandboxState::kRunning);
  if (!t) co_return t;
  auto h = co_await HandOut(*sb);  // the clock stood still while paused
  if (!h) co_return std::unexpected(h.error());
  if (sb->refresh_on_resume_) {
    sb->refresh_on_resume_ = false;
    RefreshInBackground(sb);
  }
  co_return std::expected<void, VmError>{};
}

std::shared_ptr<Sandbox> SandboxManager::Find(const std::string& id) const {
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second;
}

std::shared_ptr<GuestAgent> SandboxManager::Agent(const std::string& id) const {
  return AgentGuestOf(Find(id));
}

std::vector<std::shared_ptr<Sandbox>> SandboxManager::List() const {
  std::vector<std::shared_ptr<Sandbox>> v;
  for (const auto& [id, sb] : sandboxes_) v.push_back(sb);
  return v;
}

PoolStats SandboxManager::Stats() const {
  PoolStats s{slots_.ready(), pools_.prestarted(), pools_.warm(), sandboxes_.size(), slots_.free()};
  s.refreshes_running = refresh_turns_;
  s.refreshes_waiting = refresh_queue_.size();
  for (const auto& [id, sb] : sandboxes_) s.trimmed += sb->state_ == SandboxState::kRunning && sb->idle_trim_.trimmed() && sb->idle_trim_.trims() > 0;
  s.trims_total = trims_total_;
  return s;
}

}  // namespace deskbox::vmhost
