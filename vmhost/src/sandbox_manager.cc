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

namespace {
VmError JailerErr(std::string m) { return {VmError::Code::kJailer, std::move(m)}; }
}  // namespace

SandboxManager::SandboxManager(asio::any_io_executor executor, Jailer& jailer, VmHostConfig config)
    : executor_(executor),
      jailer_(jailer),
      config_(std::move(config)),
      slots_(jailer, config_.first_slot, config_.max_slots),
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

asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> SandboxManager::Prestart(
    uint32_t slot) {
  jailer::v1::Request req;
  auto* l = req.mutable_launch();
  l->set_slot(slot);
  l->set_mode(jailer::v1::INCOMING_DEFER);
  l->set_template_name(config_.template_name);
  l->set_cpu_model(manifest_.cpu_model());
  l->set_accelerator(accelerator_);
  l->set_tb_size_mib(config_.tb_size_mib);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) co_return std::unexpected(r.error());
  if (r->fds.size() != 3) co_return std::unexpected(JailerErr("launch returned no sockets"));
  auto sb = std::make_shared<Sandbox>();
  sb->slot_ = slot;
  sb->qemu_pid_ = r->response.launch().pid();
  sb->qmp_ = std::make_unique<QmpClient>(
      QmpClient::Socket(executor_, asio::local::stream_protocol(), r->fds[0].release()));
  sb->agent_ = std::make_unique<AgentClient>(
      AgentClient::Socket(executor_, asio::local::stream_protocol(), r->fds[1].release()));
  sb->pidfd_ = std::make_unique<asio::posix::stream_descriptor>(executor_, r->fds[2].release());
  auto hs = co_await sb->qmp_->Handshake(10s);
  if (!hs) co_return std::unexpected(VmError{VmError::Code::kQemu, "QMP handshake: " + hs.error().message});
  co_return sb;
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Restore(Sandbox& sb) {
  std::string tdir = config_.cache_dir + "/templates/" + config_.template_name;
  auto caps = co_await sb.qmp_->Execute("migrate-set-capabilities",
                                       IgnoreSharedCapability());
  if (!caps)
    co_return std::unexpected(
        VmError{VmError::Code::kQemu, "migrate-set-capabilities: " + caps.error().message});
  auto inc = co_await sb.qmp_->Execute("migrate-incoming", UriArgument("file:" + tdir + "/" + kStateFile));
  if (!inc) co_return std::unexpected(VmError{VmError::Code::kQemu, "migrate-incoming: " + inc.error().message});
  auto done = co_await sb.qmp_->WaitEvent("MIGRATION", config_.restore_timeout, [](const json& d) {
    std::string st = d.value("status", "");
    return st == "completed" || st == "failed" || st == "cancelled";
  });
  if (!done) co_return std::unexpected(VmError{VmError::Code::kQemu, "restore did not complete: " + done.error().message});
  std::string status = (*done)["data"].value("status", "");
  if (status != "completed") {
    auto q = co_await sb.qmp_->Execute("query-migrate", json::object(), 2s);
    co_return std::unexpected(VmError{VmError::Code::kQemu,
                                      fmt::format("restore {}: {}", status, q ? q->value("error-desc", "") : "")});
  }
  // The template was saved stopped, so the guest waits for us.
  auto cont = co_await sb.qmp_->Execute("cont");
  if (!cont) co_return std::unexpected(VmError{VmError::Code::kQemu, "cont: " + cont.error().message});
  // The guest agent may reopen its port once it runs again (the restored port state says the
  // host was connected before the snapshot); a request sent meanwhile is lost.
  co_return co_await PingAgent(sb, config_.ready_timeout);
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::PingAgent(Sandbox& sb, std::chrono::milliseconds timeout) {
  // Short tries until one is answered: a request the agent dropped (it reopened its port) costs
  // two seconds, not the whole timeout.
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    agent::v1::Request ping;
    ping.mutable_ping();
    auto pong = co_await sb.agent_->Call(std::move(ping), 2s);
    if (pong) co_return std::expected<void, VmError>{};
    if (pong.error().code != AgentError::Code::kTimeout || std::chrono::steady_clock::now() > deadline)
      co_return std::unexpected(VmError{VmError::Code::kAgent, "guest agent: " + pong.error().message});
  }
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::HandOut(Sandbox& sb) {
  // The clock in the snapshot is stale and every clone starts from the same RNG state. A
  // request the agent dropped is sent again once a ping gets through.
  auto step = [&](const char* what, bool clock) -> asio::awaitable<std::expected<void, VmError>> {
    for (int attempt = 0;; ++attempt) {
      // No co_await inside a conditional expression (GCC 12 miscompiles some).
      std::expected<void, AgentError> r;
      if (clock)
        r = co_await sb.agent_->SetClockNow(10s);
      else
        r = co_await sb.agent_->ReseedFromHost(10s);
      if (r) co_return std::expected<void, VmError>{};
      if (attempt > 0 || r.error().code != AgentError::Code::kTimeout)
        co_return std::unexpected(VmError{VmError::Code::kAgent, fmt::format("{}: {}", what, r.error().message)});
      log::Warn(kLog, "slot {}: the agent did not answer {}; pinging it", sb.slot_, what);
      if (auto p = co_await PingAgent(sb, 20s); !p) co_return p;
    }
  };
  // Both requests are in flight at once: the agent answers each as it is done, and a warm
  // hand-out is then one round trip to a guest that has to wake up for it.
  auto [clock, reseed] = co_await (step("set clock", true) && step("reseed", false));
  if (!clock) co_return clock;
  co_return reseed;
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
  if (!warm_.empty()) {
    sb = warm_.front();
    warm_.pop_front();
    path = CreatePath::kWarm;
  } else {
    if (!prestarted_.empty()) {
      sb = prestarted_.front();
      prestarted_.pop_front();
      path = CreatePath::kPrestarted;
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
  PoolStats s{slots_.ready(), prestarted_.size(), warm_.size(), sandboxes_.size(), slots_.free()};
  s.refreshes_running = refresh_turns_;
  s.refreshes_waiting = refresh_queue_.size();
  for (const auto& [id, sb] : sandboxes_) s.trimmed += sb->state_ == SandboxState::kRunning && sb->idle_trim_.trimmed() && sb->idle_trim_.trims() > 0;
  s.trims_total = trims_total_;
  return s;
}

asio::awaitable<bool> SandboxManager::WaitPoolsFull(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (slots_.ready() >= config_.netns_pool && prestarted_.size() >= config_.prestart_pool &&
        warm_.size() >= config_.warm_pool && !refilling_)
      co_return true;
    co_await Sleep(20ms);
  }
  co_return false;
}

asio::awaitable<void> SandboxManager::RefillLoop(std::shared_ptr<bool> alive) {
  int failures = 0;
  while (*alive && !shutting_down_) {
    refilling_ = true;
    bool progress = false;
    bool failed = false;
    // Warm first: it is what makes create fast. A warm one consumes a pre-started one.
    if (warm_.size() < config_.warm_pool) {
      std::shared_ptr<Sandbox> sb;
      if (!prestarted_.empty()) {
        sb = prestarted_.front();
        prestarted_.pop_front();
      } else {
        auto slot = co_await slots_.Take();
        if (slot) {
          auto p = co_await Prestart(*slot);
          if (p) {
            sb = *p;
            co_await SetPriority(*sb, /*background=*/true);
          } else { log::Warn(kLog, "pool: {}", p.error().message); co_await ReleaseSlot(*slot); failed = true; }
        } else {
          failed = true;
        }
      }
      while (sb && *alive && !shutting_down_ && client_restores_ > 0) co_await Sleep(100ms);
      if (!*alive) co_return;
      if (sb && *alive) {
        auto r = co_await Restore(*sb);
        if (r && *alive) r = co_await HandOut(*sb);
        if (r && *alive) r = co_await RefreshBrowser(*sb);
        if (!*alive) co_return;  // the manager is gone; its jailer client too
        if (r && !shutting_down_) {
          warm_.push_back(sb);
          progress = true;
        } else {
          if (!r) log::Warn(kLog, "pool: warm restore in slot {}: {}", sb->slot_, r.error().message);
          sb->qmp_->Close();
          sb->agent_->Close();
          co_await ReleaseSlot(sb->slot_);
          failed = !r.has_value();
        }
      }
    } else if (prestarted_.size() < config_.prestart_pool) {
      auto slot = co_await slots_.Take();
      if (slot) {
        auto p = co_await Prestart(*slot);
        if (!*alive) co_return;
        if (p && !shutting_down_) {
          co_await SetPriority(**p, /*background=*/true);
          if (!*alive) co_return;
          prestarted_.push_back(*p);
          progress = true;
        } else {
          if (!p) log::Warn(kLog, "pool: prestart: {}", p.error().message);
          co_await ReleaseSlot(*slot);
          failed = true;
        }
      } else {
        failed = true;
      }
    } else if (slots_.ready() < config_.netns_pool && slots_.free() > 0) {
      auto slot = co_await slots_.Prepare();
      if (!*alive) co_return;
      if (slot && *slot) {
        progress = true;
      } else {
        if (!slot) log::Warn(kLog, "pool: network slot: {}", slot.error().message);
        failed = true;
      }
    }
    if (!*alive) co_return;
    refilling_ = false;
    failures = failed ? failures + 1 : 0;
    if (progress) continue;
    // A shutdown that began during this step kicked a timer nobody waited on yet.
    if (shutting_down_) break;
    // Nothing to do (or back off after failures): sleep until kicked.
    refill_timer_.expires_after(failed ? std::chrono::milliseconds(std::min(30000, 500 << std::min(failures, 6)))
                                       : std::chrono::milliseconds(60000));
    boost::system::error_code ec;
    co_await refill_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  if (*alive) refill_exited_ = true;
}

asio::awaitable<void> SandboxManager::Shutdown(bool keep_sandboxes) {
  shutting_down_ = true;
  KickRefill();
  // Let an in-flight refill step finish (it hands its VM back below or releases it itself).
  for (int i = 0; i < 1200 && refill_started_ && !refill_exited_; ++i) co_await Sleep(50ms);
  if (keep_sandboxes) {
    for (auto& sb : List()) {
      // Leave the VM to the next process; only our ends of its sockets go.
      if (sb->qmp_) sb->qmp_->Close();
      if (sb->agent_) sb->agent_->Close();
      if (sb->pidfd_) {
        boost::system::error_code ec;
        sb->pidfd_->close(ec);
      }
    }
    sandboxes_.clear();
  }
  for (auto& sb : List()) co_await Transition(*sb, SandboxState::kStopped);
  // Refreshes waiting for a turn all take one now: each ends at once on its stopped guest (or,
  // for a kept sandbox, its closed agent).
  refresh_turns_ += refresh_queue_.size();
  for (auto& t : refresh_queue_) t->cancel();
  refresh_queue_.clear();
  // A browser refresh still running after a hand-out ends once it sees its guest gone (or, for
  // a kept sandbox, its agent closed); it must not outlive the manager.
  for (int i = 0; i < 1200 && background_refreshes_ > 0; ++i) co_await Sleep(50ms);
  while (!warm_.empty()) {
    auto sb = warm_.front();
    warm_.pop_front();
    sb->qmp_->Close();
    sb->agent_->Close();
    co_await ReleaseSlot(sb->slot_);
  }
  while (!prestarted_.empty()) {
    auto sb = prestarted_.front();
    prestarted_.pop_front();
    sb->qmp_->Close();
    sb->agent_->Close();
    co_await ReleaseSlot(sb->slot_);
  }
  co_await slots_.ReleaseReady();
}

}  // namespace deskbox::vmhost
