#include "timeout_clock.h"

#include <fmt/format.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log.h"

namespace deskbox::api {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using vmhost::SandboxState;

namespace {
constexpr char kClockLog[] = "api";
}

void TimeoutClock::Start() {
  if (alive_) return;
  alive_ = std::make_shared<bool>(true);
  asio::co_spawn(ctx_.executor, Loop(alive_), asio::detached);
}

void TimeoutClock::Stop() {
  if (alive_) *alive_ = false;
  alive_.reset();
  timer_.cancel();
}

asio::awaitable<void> TimeoutClock::Loop(std::shared_ptr<bool> alive) {
  while (*alive) {
    timer_.expires_after(250ms);
    boost::system::error_code ec;
    co_await timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*alive) co_return;
    co_await Tick();
  }
}

asio::awaitable<void> TimeoutClock::Tick() {
  // State changes whose write failed (a full state disk) are written once there is room.
  ctx_.sandboxes.SaveUnsaved();
  int64_t now = ctx_.clock.NowMs();
  std::vector<std::string> due;
  for (const auto& [id, r] : ctx_.sandboxes.records())
    if (r.state == SandboxState::kRunning && r.expires_at_ms && r.expires_at_ms <= now)
      due.push_back(id);
  for (const auto& id : due) {
    auto turn = ctx_.sandboxes.TryTurn(id);
    if (!turn) continue;
    SandboxRecord* r = ctx_.sandboxes.Find(id);
    if (!r || r->state != SandboxState::kRunning || ctx_.sandboxes.Deleting(id)) continue;
    std::string action = r->on_timeout;
    std::string detail;
    bool done = false;
    if (action == "stop") {
      auto d = co_await ctx_.manager.Destroy(id);
      done = d || d.error().code == vmhost::VmError::Code::kNotFound;
      if (!d) detail = d.error().message;
    } else {
      auto p = co_await ctx_.manager.Pause(id);
      done = static_cast<bool>(p);
      if (!p) detail = p.error().message;
    }
    r = ctx_.sandboxes.Find(id);
    if (!r) continue;
    ctx_.metrics.CountTimeout(action);
    if (done && r->state == SandboxState::kRunning) {
      ctx_.sandboxes.Transition(
          *r, action == "stop" ? SandboxState::kStopped : SandboxState::kPaused,
          {.reason = "timeout",
           .detail = fmt::format("timeout_s={} expired; on_timeout={}", r->timeout_s, action)});
      log::Info(kClockLog, "sandbox {}: timeout, {}", id, vmhost::ToString(r->state));
    } else if (!done) {
      log::Warn(kClockLog, "sandbox {}: timeout {} failed: {}", id, action, detail);
      r->expires_at_ms = ctx_.clock.NowMs() + 5000;  // try again shortly rather than spin
    }
  }
}

}  // namespace deskbox::api
