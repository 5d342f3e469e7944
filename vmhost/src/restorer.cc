#include "vmhost/restorer.h"

#include <fmt/format.h>

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "common/log.h"
#include "manager_names.h"

namespace deskbox::vmhost {

using manager::kLog;

asio::awaitable<std::expected<void, VmError>> Restorer::Restore(QmpClient& qmp, AgentClient& agent) const {
  auto qemu_err = [](std::string what, const QmpError& e) {
    return std::unexpected(VmError{VmError::Code::kQemu, what + ": " + e.message});
  };
  auto caps = co_await qmp.Execute("migrate-set-capabilities", IgnoreSharedCapability());
  if (!caps) co_return qemu_err("migrate-set-capabilities", caps.error());
  auto inc = co_await qmp.Execute("migrate-incoming", UriArgument("file:" + settings_.state_file));
  if (!inc) co_return qemu_err("migrate-incoming", inc.error());
  auto done = co_await qmp.WaitEvent("MIGRATION", settings_.restore_timeout, [](const json& d) {
    std::string st = d.value("status", "");
    return st == "completed" || st == "failed" || st == "cancelled";
  });
  if (!done) co_return qemu_err("restore did not complete", done.error());
  std::string status = (*done)["data"].value("status", "");
  if (status != "completed") {
    auto q = co_await qmp.Execute("query-migrate", json::object(), 2s);
    std::string desc = q ? q->value("error-desc", "") : "";
    co_return std::unexpected(VmError{VmError::Code::kQemu, fmt::format("restore {}: {}", status, desc)});
  }
  // The template was saved stopped, so the guest waits for us.
  auto cont = co_await qmp.Execute("cont");
  if (!cont) co_return qemu_err("cont", cont.error());
  co_return co_await PingAgent(agent, settings_.ready_timeout);
}

asio::awaitable<std::expected<void, VmError>> Restorer::PingAgent(AgentClient& agent,
                                                                  std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    agent::v1::Request ping;
    ping.mutable_ping();
    auto pong = co_await agent.Call(std::move(ping), settings_.ping_try);
    if (pong) co_return std::expected<void, VmError>{};
    if (pong.error().code != AgentError::Code::kTimeout || std::chrono::steady_clock::now() > deadline)
      co_return std::unexpected(VmError{VmError::Code::kAgent, "guest agent: " + pong.error().message});
  }
}

asio::awaitable<std::expected<void, VmError>> Restorer::HandOutStep(AgentClient& agent, uint32_t slot, bool clock) const {
  const char* what = clock ? "set clock" : "reseed";
  for (int attempt = 0;; ++attempt) {
    // No co_await inside a conditional expression (g++ 12 miscompiles some).
    std::expected<void, AgentError> r;
    if (clock)
      r = co_await agent.SetClockNow(settings_.hand_out_try);
    else
      r = co_await agent.ReseedFromHost(settings_.hand_out_try);
    if (r) co_return std::expected<void, VmError>{};
    if (attempt > 0 || r.error().code != AgentError::Code::kTimeout)
      co_return std::unexpected(VmError{VmError::Code::kAgent, fmt::format("{}: {}", what, r.error().message)});
    log::Warn(kLog, "slot {}: the agent did not answer {}; pinging it", slot, what);
    if (auto p = co_await PingAgent(agent, settings_.hand_out_ping); !p) co_return p;
  }
}

asio::awaitable<std::expected<void, VmError>> Restorer::HandOut(AgentClient& agent, uint32_t slot) const {
  // Both requests are in flight at once: the agent answers each as it is done, and a warm
  // hand-out is then one round trip to a guest that has to wake up for it.
  auto [clock, reseed] = co_await (HandOutStep(agent, slot, true) && HandOutStep(agent, slot, false));
  if (!clock) co_return clock;
  co_return reseed;
}

}  // namespace deskbox::vmhost
