// SandboxManager's pools: starting QEMUs ahead of demand, the refill loop (VmPools says what to
// make next), and handing everything back at shutdown.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "async_sleep.h"
#include "common/log.h"
#include "manager_names.h"
#include "vmhost/sandbox_manager.h"

namespace deskbox::vmhost {

using manager::kLog;

asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> SandboxManager::Prestart(uint32_t slot) {
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
  if (r->fds.size() != 3)
    co_return std::unexpected(manager::JailerErr("launch returned no sockets"));
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

asio::awaitable<void> SandboxManager::DiscardPooled(Sandbox& sb) {
  sb.qmp_->Close();
  sb.agent_->Close();
  co_await ReleaseSlot(sb.slot_);
}

asio::awaitable<bool> SandboxManager::WaitPoolsFull(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pools_.Full(slots_.ready()) && !refilling_) co_return true;
    co_await Sleep(20ms);
  }
  co_return false;
}

asio::awaitable<SandboxManager::RefillOutcome> SandboxManager::RefillWarm(std::shared_ptr<bool> alive) {
  std::shared_ptr<Sandbox> sb = pools_.TakePrestarted();
  if (!sb) {
    auto slot = co_await slots_.Take();
    if (!slot) co_return RefillOutcome{.failed = true};
    auto p = co_await Prestart(*slot);
    if (!p) {
      log::Warn(kLog, "pool: {}", p.error().message);
      co_await ReleaseSlot(*slot);
      co_return RefillOutcome{.failed = true};
    }
    sb = *p;
    co_await SetPriority(*sb, /*background=*/true);
  }
  // While a client waits on a restore, this one holds back (see CreateOnce).
  while (*alive && !shutting_down_ && client_restores_ > 0) co_await Sleep(100ms);
  if (!*alive) co_return RefillOutcome{};
  auto r = co_await Restore(*sb);
  if (r && *alive) r = co_await HandOut(*sb);
  if (r && *alive) r = co_await RefreshBrowser(*sb);
  if (!*alive) co_return RefillOutcome{};  // the manager is gone; its jailer client too
  if (r && !shutting_down_) {
    pools_.AddWarm(sb);
    co_return RefillOutcome{.progress = true};
  }
  if (!r) log::Warn(kLog, "pool: warm restore in slot {}: {}", sb->slot_, r.error().message);
  co_await DiscardPooled(*sb);
  co_return RefillOutcome{.failed = !r.has_value()};
}

asio::awaitable<SandboxManager::RefillOutcome> SandboxManager::RefillPrestarted(std::shared_ptr<bool> alive) {
  auto slot = co_await slots_.Take();
  if (!slot) co_return RefillOutcome{.failed = true};
  auto p = co_await Prestart(*slot);
  if (!*alive) co_return RefillOutcome{};
  if (p && !shutting_down_) {
    co_await SetPriority(**p, /*background=*/true);
    if (!*alive) co_return RefillOutcome{};
    pools_.AddPrestarted(*p);
    co_return RefillOutcome{.progress = true};
  }
  if (!p) log::Warn(kLog, "pool: prestart: {}", p.error().message);
  co_await ReleaseSlot(*slot);
  co_return RefillOutcome{.failed = true};
}

asio::awaitable<void> SandboxManager::RefillLoop(std::shared_ptr<bool> alive) {
  int failures = 0;
  while (*alive && !shutting_down_) {
    refilling_ = true;
    RefillOutcome step;
    switch (pools_.Next(slots_.ready(), slots_.free())) {
      case RefillStep::kWarm:
        step = co_await RefillWarm(alive);
        break;
      case RefillStep::kPrestart:
        step = co_await RefillPrestarted(alive);
        break;
      case RefillStep::kSlot: {
        auto slot = co_await slots_.Prepare();
        if (!*alive) co_return;
        if (slot && *slot) {
          step.progress = true;
        } else {
          if (!slot) log::Warn(kLog, "pool: network slot: {}", slot.error().message);
          step.failed = true;
        }
        break;
      }
      case RefillStep::kNone:
        break;
    }
    if (!*alive) co_return;
    refilling_ = false;
    failures = step.failed ? failures + 1 : 0;
    if (step.progress) continue;
    // A shutdown that began during this step kicked a timer nobody waited on yet.
    if (shutting_down_) break;
    // Nothing to do (or back off after failures): sleep until kicked.
    refill_timer_.expires_after(VmPools::Pause(failures));
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
  for (auto& sb : pools_.TakeAll()) co_await DiscardPooled(*sb);
  co_await slots_.ReleaseReady();
}

}  // namespace deskbox::vmhost
