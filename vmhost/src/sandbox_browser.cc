// SandboxManager and the guest's browser: reaching the guest's services through its netns,
// the browser refresh after a restore (RefreshBrowser, in turns) and the gate that waits for it.
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
#include "vmhost/sandbox_manager.h"

namespace deskbox::vmhost {

namespace {
using manager::JailerErr;
using manager::kLog;
}  // namespace

asio::awaitable<std::expected<void, VmError>> SandboxManager::RefreshBrowser(Sandbox& sb) {
  // Chromium's processes restored from the snapshot share user-space random state across
  // clones, and V8's generators are seeded once per renderer (docs/guest.md, "Random state after
  // restore"). The template holds no renderer (prepare-template); the guest script kills any
  // that runs, and on a CPU without RDRAND the network service. Then every page is reloaded: the
  // browser starts a new renderer for it, which seeds from the kernel reseeded before this.
  // Reloading keeps the page and its target id, so a client sees one page throughout; a new tab
  // would cost a tab and a window close as well, all translated afresh under emulation.
  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + 3 * config_.ready_timeout;  // up to three rounds
  auto ms = [](auto d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::string last;
  // A sandbox refreshed after its hand-out can be destroyed or fail meanwhile.
  auto gone = [&] { return sb.state_ == SandboxState::kStopped || sb.state_ == SandboxState::kFailed; };
  auto gone_error = [&] {
    return std::unexpected(VmError{VmError::Code::kInvalidState,
                                   fmt::format("sandbox {} is {}", sb.id_, ToString(sb.state_))});
  };
  for (int round = 1;; ++round) {
    if (gone()) co_return gone_error();
    agent::v1::Request req;
    req.mutable_exec()->add_argv("/usr/lib/deskbox/refresh-browser");
    // Quick normally; under emulation with other guests restoring it has taken over 30 s.
    req.mutable_exec()->set_timeout_s(120);
    auto r = co_await sb.agent_->Call(std::move(req), 130s);
    if (gone()) co_return gone_error();
    if (!r) co_return std::unexpected(VmError{VmError::Code::kAgent, "refresh-browser: " + r.error().message});
    if (r->exec().exit_code() != 0)
      co_return std::unexpected(VmError{VmError::Code::kGuest,
                                        fmt::format("refresh-browser exited {}: {}", r->exec().exit_code(),
                                                    r->exec().stderr().substr(0, 200))});
    auto t_script = std::chrono::steady_clock::now();
    auto ready = co_await WaitGuestServices(sb.slot_, config_.ready_timeout, gone);
    if (gone()) co_return gone_error();
    if (!ready) co_return ready;
    auto t_services = std::chrono::steady_clock::now();
    // A loaded host (a compile beside two guests) has made /json/list take over 5 s.
    auto round_end = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(45));
    auto left = [&] {
      return std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(round_end - std::chrono::steady_clock::now()),
                        1000ms, 15000ms);
    };
    auto pages = co_await GuestPageIds(sb.slot_, 15s);
    if (!pages) {
      last = pages.error().message;
    } else if (pages->empty()) {
      // No window left (never in a template the builder made): open the start page.
      auto opened = co_await GuestHttp(sb.slot_, "PUT", "/json/new", 15s);
      if (!opened) last = opened.error().message;
    } else {
      for (const auto& [id, url] : *pages)
        if (auto reload = co_await GuestPageCall(sb.slot_, id, "Page.reload", json::object(), left()); !reload)
          last = reload.error().message;
    }
    auto t_reload = std::chrono::steady_clock::now();
    // Done when every page has loaded something and runs script. While a page's new renderer
    // starts, its evaluation waits or fails; ask again until the round ends.
    bool fresh = false;
    while (!fresh && std::chrono::steady_clock::now() < round_end) {
      if (gone()) co_return gone_error();
      pages = co_await GuestPageIds(sb.slot_, 15s);
      if (pages && !pages->empty()) {
        fresh = true;
        for (const auto& [id, url] : *pages) {
          if (url.empty()) {
            last = "a page has not loaded";
          } else if (auto runs = co_await GuestPageEvaluates(sb.slot_, id, left()); !runs) {
            last = "a page does not run script: " + runs.error().message;
          } else {
            continue;
          }
          fresh = false;
          break;
        }
      } else {
        last = pages ? "no page" : pages.error().message;
      }
      if (!fresh) co_await Sleep(250ms);  // each poll is work for the browser, which is starting a renderer
    }
    log::Debug(kLog, "slot {}: refresh round {}: script {:.0f} ms, RFB + CDP {:.0f} ms, reload {:.0f} ms, pages {:.0f} ms",
               sb.slot_, round, ms(t_script - t0), ms(t_services - t_script), ms(t_reload - t_services),
               ms(std::chrono::steady_clock::now() - t_reload));
    if (fresh) break;
    if (round >= 3 || std::chrono::steady_clock::now() >= deadline)
      co_return std::unexpected(VmError{VmError::Code::kTimeout,
                                        fmt::format("slot {}: the browser did not reload its pages: {}", sb.slot_, last)});
    log::Warn(kLog, "slot {}: refreshing the browser again ({})", sb.slot_, last);
  }
  log::Debug(kLog, "slot {}: browser refreshed in {:.0f} ms", sb.slot_, ms(std::chrono::steady_clock::now() - t0));
  co_return std::expected<void, VmError>{};
}

asio::awaitable<std::expected<asio::ip::tcp::socket, VmError>> SandboxManager::ConnectGuest(
    uint32_t slot, uint16_t port, std::chrono::milliseconds timeout) {
  jailer::v1::Request req;
  req.mutable_open_netns_socket()->set_slot(slot);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) co_return std::unexpected(r.error());
  if (r->fds.size() != 1) co_return std::unexpected(JailerErr("no socket returned"));
  asio::ip::tcp::socket sock(executor_, asio::ip::tcp::v4(), r->fds[0].release());
  asio::steady_timer timer(executor_);
  timer.expires_after(timeout);
  timer.async_wait([&sock](boost::system::error_code ec) {
    if (!ec) sock.cancel();
  });
  boost::system::error_code ec;
  co_await sock.async_connect({asio::ip::make_address_v4(slot_network::kGuestIPv4), port},
                              asio::redirect_error(asio::use_awaitable, ec));
  timer.cancel();
  if (ec)
    co_return std::unexpected(VmError{ec == asio::error::operation_aborted ? VmError::Code::kTimeout
                                                                           : VmError::Code::kGuest,
                                      fmt::format("connect to guest port {}: {}", port, ec.message())});
  co_return std::move(sock);
}

namespace {
// Reads up to `max` bytes until `done(buffer)` or timeout.
asio::awaitable<std::expected<std::string, std::string>> ReadUntil(
    asio::ip::tcp::socket& s, size_t max, std::chrono::milliseconds timeout,
    std::function<bool(const std::string&)> done) {
  asio::steady_timer timer(s.get_executor());
  timer.expires_after(timeout);
  timer.async_wait([&s](boost::system::error_code ec) {
    if (!ec) s.cancel();
  });
  std::string buf;
  char tmp[4096];
  while (!done(buf)) {
    boost::system::error_code ec;
    size_t n = co_await s.async_read_some(asio::buffer(tmp), asio::redirect_error(asio::use_awaitable, ec));
    buf.append(tmp, n);
    if (buf.size() > max) {
      timer.cancel();
      co_return std::unexpected(std::string("answer too large"));
    }
    if (ec) {
      timer.cancel();
      if (done(buf)) break;
      co_return std::unexpected(ec.message());
    }
  }
  timer.cancel();
  co_return buf;
}
}  // namespace

asio::awaitable<std::expected<void, VmError>> SandboxManager::WaitGuestServices(
    uint32_t slot, std::chrono::milliseconds timeout, std::function<bool()> stop) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    return std::max(1ms, std::chrono::duration_cast<std::chrono::milliseconds>(
                             deadline - std::chrono::steady_clock::now()));
  };
  // One attempt at each service: "" when it answered, else what went wrong.
  auto rfb_once = [&]() -> asio::awaitable<std::string> {
    auto s = co_await ConnectGuest(slot, slot_network::kGuestRfbPort, std::min(left(), 2000ms));
    if (!s) co_return s.error().message;
    auto banner = co_await ReadUntil(*s, 64, std::min(left(), 2000ms),
                                     [](const std::string& b) { return b.size() >= 12; });
    if (banner && banner->starts_with("RFB 003.")) co_return "";
    co_return "RFB: " + (banner ? "unexpected banner" : banner.error());
  };
  auto cdp_once = [&]() -> asio::awaitable<std::string> {
    auto s = co_await ConnectGuest(slot, slot_network::kGuestCdpPort, std::min(left(), 2000ms));
    if (!s) co_return s.error().message;
    auto version =
        co_await DevToolsHttp(std::move(*s), boost::beast::http::verb::get, "/json/version",
                              {.body_bytes = 64 * 1024, .timeout = std::min(left(), 3000ms)});
    if (!version) co_return "CDP: " + version.error().message;
    // The browser process answers it (no page does), with its name and version.
    if (version->status == 200 && version->body.find("\"Browser\"") != std::string::npos)
      co_return "";
    co_return fmt::format("CDP: /json/version answered {}: {}", version->status,
                          version->body.substr(0, 80));
  };
  // Each service is asked again every 10 ms until it answers; both are asked at once, so
  // ready is when the slower one answers, not the sum of the two.
  auto until_answered = [&](auto once) -> asio::awaitable<std::string> {
    std::string error = "no answer";
    while (std::chrono::steady_clock::now() < deadline) {
      if (stop && stop()) co_return "stopped waiting";
      error = co_await once();
      if (error.empty()) co_return error;
      co_await Sleep(10ms);
    }
    co_return error;
  };
  auto [rfb_error, cdp_error] = co_await (until_answered(rfb_once) && until_answered(cdp_once));
  if (rfb_error.empty() && cdp_error.empty()) co_return std::expected<void, VmError>{};
  co_return std::unexpected(VmError{VmError::Code::kTimeout,
                                    fmt::format("guest services not ready in slot {}: {}", slot,
                                                rfb_error.empty() ? cdp_error : rfb_error)});
}

asio::awaitable<std::expected<std::string, VmError>> SandboxManager::GuestHttp(uint32_t slot, const std::string& method,
                                                                              const std::string& path,
                                                                              std::chrono::milliseconds timeout) {
  auto what = [&] { return fmt::format("CDP {} {}: ", method, path); };
  auto s = co_await ConnectGuest(slot, slot_network::kGuestCdpPort, timeout);
  if (!s) co_return std::unexpected(s.error());
  auto answer = co_await DevToolsHttp(std::move(*s), boost::beast::http::string_to_verb(method),
                                      path, {.timeout = timeout});
  if (!answer)
    co_return std::unexpected(VmError{answer.error().code == DevToolsHttpError::Code::kTimeout
                                          ? VmError::Code::kTimeout
                                          : VmError::Code::kGuest,
                                      what() + answer.error().message});
  if (answer->status != 200)
    co_return std::unexpected(VmError{
        VmError::Code::kGuest,
        what() + fmt::format("answered {}: {}", answer->status, answer->body.substr(0, 80))});
  co_return std::move(answer->body);
}

asio::awaitable<std::expected<std::map<std::string, std::string>, VmError>> SandboxManager::GuestPageIds(
    uint32_t slot, std::chrono::milliseconds timeout) {
  auto body = co_await GuestHttp(slot, "GET", "/json/list", timeout);
  if (!body) co_return std::unexpected(body.error());
  json list = json::parse(*body, nullptr, false);
  std::map<std::string, std::string> pages;
  if (list.is_array())
    for (const auto& t : list)
      if (t.is_object()) {
        auto type = t.find("type"), id = t.find("id"), url = t.find("url");
        if (type != t.end() && id != t.end() && type->is_string() && id->is_string() && *type == "page")
          pages[id->get<std::string>()] = url != t.end() && url->is_string() ? url->get<std::string>() : "";
      }
  co_return pages;
}

void SandboxManager::RefreshInBackground(const std::shared_ptr<Sandbox>& sb) {
  sb->browser_refreshing_ = true;
  ++background_refreshes_;
  ++client_restores_;  // refills hold back until this one's renderer runs, as during the restore
  asio::co_spawn(
      executor_,
      [](SandboxManager* self, std::shared_ptr<Sandbox> sb, std::shared_ptr<bool> alive) -> asio::awaitable<void> {
        auto t0 = std::chrono::steady_clock::now();
        co_await self->RefreshTurn();
        if (!*alive) co_return;
        auto r = co_await self->RefreshBrowser(*sb);
        if (!*alive) co_return;
        self->EndRefreshTurn();
        --self->client_restores_;
        if (!r && !self->shutting_down_ &&
            (sb->state_ == SandboxState::kRunning || sb->state_ == SandboxState::kPaused)) {
          co_await self->LogGuestState(*sb, r.error().message);
          if (!*alive) co_return;
          sb->browser_failure_ = r.error().message;
          sb->failure_ = "the browser did not restart after the restore: " + r.error().message;
          if (sb->state_ == SandboxState::kRunning || sb->state_ == SandboxState::kPaused)
            co_await self->Transition(*sb, SandboxState::kFailed);
          if (!*alive) co_return;
        } else if (!r) {
          sb->browser_failure_ = r.error().message;
        } else {
          log::Debug(kLog, "sandbox {}: pages fresh {:.0f} ms after hand-out", sb->id_,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        sb->browser_refreshing_ = false;
        for (auto& w : sb->browser_waiters_) w->cancel();
        sb->browser_waiters_.clear();
        --self->background_refreshes_;
        if (self->browser_observer_ && !self->shutting_down_) self->browser_observer_(*sb);
        self->KickRefill();
      }(this, sb, alive_),
      asio::detached);
}

asio::awaitable<void> SandboxManager::RefreshTurn() {
  if (refresh_turns_ < refresh_limit_ || shutting_down_) {
    ++refresh_turns_;
    co_return;
  }
  auto t = std::make_shared<asio::steady_timer>(executor_, asio::steady_timer::time_point::max());
  refresh_queue_.push_back(t);
  boost::system::error_code ec;
  co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));  // woken with the turn
}

void SandboxManager::EndRefreshTurn() {
  if (refresh_queue_.empty()) {
    --refresh_turns_;
    return;
  }
  refresh_queue_.front()->cancel();  // the turn passes on, the count stays
  refresh_queue_.pop_front();
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::WaitBrowserFresh(std::shared_ptr<Sandbox> sb,
                                                                               std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (sb->browser_refreshing_ && sb->state_ != SandboxState::kStopped && sb->state_ != SandboxState::kFailed) {
    if (std::chrono::steady_clock::now() >= deadline)
      co_return std::unexpected(VmError{VmError::Code::kTimeout,
                                        fmt::format("sandbox {}: its browser is still reloading its pages after the "
                                                    "restore ({} ms waited)", sb->id_, timeout.count())});
    auto t = std::make_shared<asio::steady_timer>(executor_);
    t->expires_at(deadline);
    sb->browser_waiters_.push_back(t);
    boost::system::error_code ec;
    co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::erase(sb->browser_waiters_, t);
  }
  if (sb->state_ == SandboxState::kStopped)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState, fmt::format("sandbox {} is stopped", sb->id_)});
  if (!sb->browser_failure_.empty())
    co_return std::unexpected(VmError{VmError::Code::kGuest, "the browser did not restart after the restore: " +
                                                                 sb->browser_failure_});
  if (sb->state_ == SandboxState::kFailed)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} failed: {}", sb->id_, sb->failure_)});
  co_return std::expected<void, VmError>{};
}

}  // namespace deskbox::vmhost
