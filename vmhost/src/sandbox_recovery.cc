// SandboxManager::Recover: taking over the sandboxes a previous deskboxd left running.
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "async_sleep.h"
#include "common/files.h"
#include "common/log.h"
#include "common/slot_network.h"
#include "vmhost/devtools_http.h"
#include "manager_names.h"
#include "vmhost/recovery_plan.h"
#include "vmhost/sandbox_manager.h"

namespace deskbox::vmhost {

using manager::kLog;

asio::awaitable<std::vector<AdoptResult>> SandboxManager::Recover(std::vector<AdoptRequest> wanted) {
  std::vector<AdoptResult> results;
  jailer::v1::Request list;
  list.mutable_list_slots();
  auto listed = co_await CallJailer(jailer_, std::move(list));
  std::map<uint32_t, int> running;  // slot -> live QEMU pid (0: none)
  if (listed) {
    for (const auto& s : listed->response.slots().slots()) running[s.slot()] = s.qemu_pid();
  } else {
    log::Warn(kLog, "recover: listing slots: {}", listed.error().message);
  }
  RecoveryPlan plan(std::move(running));
  for (auto& w : wanted) {
    AdoptResult res;
    res.id = w.id;
    auto fail = [&](std::string why) {
      res.failure = std::move(why);
      log::Warn(kLog, "recover: sandbox {} (slot {}): {}", w.id, w.slot, res.failure);
    };
    if (auto refusal = plan.Refusal(w, slots_.IsFree(w.slot)); !refusal.empty()) {
      fail(std::move(refusal));
    } else {
      auto sb = std::make_shared<Sandbox>();
      sb->id_ = w.id;
      sb->slot_ = w.slot;
      sb->qemu_pid_ = w.qemu_pid;
      sb->created_at_ = w.created_at;
      std::string error;
      std::vector<UniqueFd> fds;
      for (auto kind : {jailer::v1::QMP, jailer::v1::AGENT}) {
        jailer::v1::Request req;
        req.mutable_connect_socket()->set_slot(w.slot);
        req.mutable_connect_socket()->set_kind(kind);
        auto r = co_await CallJailer(jailer_, std::move(req));
        if (!r || r->fds.size() != 1) {
          error = r ? "no socket returned" : r.error().message;
          break;
        }
        fds.push_back(std::move(r->fds[0]));
      }
      UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, w.qemu_pid, 0)));
      if (error.empty() && !pidfd) error = fmt::format("pidfd_open({}): {}", w.qemu_pid, std::strerror(errno));
      std::string status;
      SandboxState state = SandboxState::kFailed;
      if (error.empty()) {
        sb->qmp_ = std::make_unique<QmpClient>(
            QmpClient::Socket(executor_, asio::local::stream_protocol(), fds[0].release()));
        sb->agent_ = std::make_unique<AgentClient>(
            AgentClient::Socket(executor_, asio::local::stream_protocol(), fds[1].release()));
        sb->pidfd_ = std::make_unique<asio::posix::stream_descriptor>(executor_, pidfd.release());
        auto hs = co_await sb->qmp_->Handshake(10s);
        if (!hs) error = "QMP handshake: " + hs.error().message;
      }
      if (error.empty()) {
        auto q = co_await sb->qmp_->Execute("query-status", json::object(), 5s);
        if (!q) error = "query-status: " + q.error().message;
        else status = q->value("status", "");
      }
      if (error.empty()) {
        if (auto st = RecoveryPlan::AdoptedState(status)) state = *st;
        else error = st.error();
      }
      if (!error.empty()) {
        if (sb->qmp_) sb->qmp_->Close();
        if (sb->agent_) sb->agent_->Close();
        fail(error);
      } else {
        sb->state_ = state;
        slots_.Claim(w.slot);
        plan.Adopted(w.slot);
        sandboxes_[sb->id_] = sb;
        WatchQemu(sb);
        res.adopted = true;
        res.state = sb->state_;
        log::Info(kLog, "recover: sandbox {} adopted in slot {} ({})", sb->id_, sb->slot_, status);
        if (w.browser_refreshing) {
          log::Info(kLog, "recover: sandbox {}: its browser refresh may not have ended; refreshing again", sb->id_);
          if (sb->state_ == SandboxState::kRunning) RefreshInBackground(sb);
          else sb->refresh_on_resume_ = true;
        }
      }
    }
    results.push_back(std::move(res));
  }
  // Everything else the jailer has is a leftover: pools of the last process, dead sandboxes.
  for (uint32_t slot : plan.Leftovers()) {
    jailer::v1::Request req;
    req.mutable_destroy_slot()->set_slot(slot);
    auto r = co_await CallJailer(jailer_, std::move(req));
    if (!r) log::Warn(kLog, "recover: destroying leftover slot {}: {}", slot, r.error().message);
    else log::Info(kLog, "recover: destroyed leftover slot {}", slot);
  }
  refill_started_ = true;
  asio::co_spawn(executor_, RefillLoop(alive_), asio::detached);
  StartTrimLoop();
  co_return results;
}

}  // namespace deskbox::vmhost
