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
#include "common/files.h"
#include "common/log.h"
#include "common/sha256.h"
#include "common/slot_network.h"
#include "vmhost/devtools_http.h"
#include "vmhost/qemu_command.h"
#include "vmhost/template.h"

namespace deskbox::vmhost {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using namespace boost::asio::experimental::awaitable_operators;
using nlohmann::json;
constexpr char kLog[] = "vmhost";

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

std::expected<JailerResult, VmError> CheckJailer(std::expected<JailerResult, std::string> r) {
  if (!r) return std::unexpected(JailerErr(r.error()));
  if (!r->response.ok()) return std::unexpected(JailerErr(r->response.error()));
  return std::move(*r);
}

}  // namespace

asio::awaitable<std::expected<JailerResult, VmError>> CallJailer(Jailer& j, jailer::v1::Request r);

SandboxManager::SandboxManager(asio::any_io_executor executor, Jailer& jailer, VmHostConfig config)
    : executor_(executor), jailer_(jailer), config_(std::move(config)), refill_timer_(executor) {
  for (uint32_t s = 0; s < config_.max_slots; ++s) free_slots_.insert(config_.first_slot + s);
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
  std::set<uint32_t> adopted_slots;
  for (auto& w : wanted) {
    AdoptResult res;
    res.id = w.id;
    auto fail = [&](std::string why) {
      res.failure = std::move(why);
      log::Warn(kLog, "recover: sandbox {} (slot {}): {}", w.id, w.slot, res.failure);
    };
    auto it = running.find(w.slot);
    if (!free_slots_.count(w.slot) || adopted_slots.count(w.slot)) {
      fail("slot is out of range or claimed twice");
    } else if (it == running.end()) {
      fail("its network slot is gone");
    } else if (it->second == 0 || it->second != w.qemu_pid) {
      fail("its QEMU process is gone");
    } else {
      auto sb = std::make_shared<Sandbox>();
      sb->id = w.id;
      sb->slot = w.slot;
      sb->qemu_pid = w.qemu_pid;
      sb->created_at = w.created_at;
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
      if (error.empty()) {
        sb->qmp = std::make_unique<QmpClient>(
            QmpClient::Socket(executor_, asio::local::stream_protocol(), fds[0].release()));
        sb->agent = std::make_unique<AgentClient>(
            AgentClient::Socket(executor_, asio::local::stream_protocol(), fds[1].release()));
        sb->pidfd = std::make_unique<asio::posix::stream_descriptor>(executor_, pidfd.release());
        auto hs = co_await sb->qmp->Handshake(10s);
        if (!hs) error = "QMP handshake: " + hs.error().message;
      }
      if (error.empty()) {
        auto q = co_await sb->qmp->Execute("query-status", json::object(), 5s);
        if (!q) error = "query-status: " + q.error().message;
        else status = q->value("status", "");
      }
      if (error.empty() && status != "running" && status != "paused")
        error = "QEMU reports status '" + status + "'";
      if (!error.empty()) {
        if (sb->qmp) sb->qmp->Close();
        if (sb->agent) sb->agent->Close();
        fail(error);
      } else {
        sb->state = status == "running" ? SandboxState::kRunning : SandboxState::kPaused;
        free_slots_.erase(w.slot);
        adopted_slots.insert(w.slot);
        sandboxes_[sb->id] = sb;
        WatchQemu(sb);
        res.adopted = true;
        res.state = sb->state;
        log::Info(kLog, "recover: sandbox {} adopted in slot {} ({})", sb->id, sb->slot, status);
        if (w.browser_refreshing) {
          log::Info(kLog, "recover: sandbox {}: its browser refresh may not have ended; refreshing again", sb->id);
          if (sb->state == SandboxState::kRunning) RefreshInBackground(sb);
          else sb->refresh_on_resume = true;
        }
      }
    }
    results.push_back(std::move(res));
  }
  // Everything else the jailer has is a leftover: pools of the last process, dead sandboxes.
  for (const auto& [slot, pid] : running) {
    if (adopted_slots.count(slot)) continue;
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

std::string SandboxManager::NewId() {
  uint8_t b[8];
  RandomBytes(b);
  return "sb-" + ToHex(b);
}

constexpr auto kRefillDelayAfterWarm = std::chrono::milliseconds(1000);

void SandboxManager::KickRefill() { refill_timer_.cancel(); }

asio::awaitable<std::expected<JailerResult, VmError>> CallJailer(Jailer& j, jailer::v1::Request r) {
  co_return CheckJailer(co_await j.Call(std::move(r)));
}

asio::awaitable<std::expected<uint32_t, VmError>> SandboxManager::TakeNetworkSlot() {
  if (!netns_ready_.empty()) {
    uint32_t s = netns_ready_.front();
    netns_ready_.pop_front();
    co_return s;
  }
  if (free_slots_.empty())
    co_return std::unexpected(VmError{VmError::Code::kCapacity,
                                      fmt::format("all {} slots are in use", config_.max_slots)});
  uint32_t slot = *free_slots_.begin();
  free_slots_.erase(free_slots_.begin());
  jailer::v1::Request req;
  req.mutable_create_slot()->set_slot(slot);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) {
    co_await ReleaseSlot(slot);
    co_return std::unexpected(r.error());
  }
  co_return slot;
}

asio::awaitable<void> SandboxManager::ReleaseSlot(uint32_t slot) {
  jailer::v1::Request req;
  req.mutable_destroy_slot()->set_slot(slot);
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) log::Warn(kLog, "releasing slot {}: {}", slot, r.error().message);
  free_slots_.insert(slot);
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
  sb->slot = slot;
  sb->qemu_pid = r->response.launch().pid();
  sb->qmp = std::make_unique<QmpClient>(
      QmpClient::Socket(executor_, asio::local::stream_protocol(), r->fds[0].release()));
  sb->agent = std::make_unique<AgentClient>(
      AgentClient::Socket(executor_, asio::local::stream_protocol(), r->fds[1].release()));
  sb->pidfd = std::make_unique<asio::posix::stream_descriptor>(executor_, r->fds[2].release());
  auto hs = co_await sb->qmp->Handshake(10s);
  if (!hs) co_return std::unexpected(VmError{VmError::Code::kQemu, "QMP handshake: " + hs.error().message});
  co_return sb;
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Restore(Sandbox& sb) {
  std::string tdir = config_.cache_dir + "/templates/" + config_.template_name;
  auto caps = co_await sb.qmp->Execute("migrate-set-capabilities",
                                       IgnoreSharedCapability());
  if (!caps)
    co_return std::unexpected(
        VmError{VmError::Code::kQemu, "migrate-set-capabilities: " + caps.error().message});
  auto inc = co_await sb.qmp->Execute("migrate-incoming", UriArgument("file:" + tdir + "/" + kStateFile));
  if (!inc) co_return std::unexpected(VmError{VmError::Code::kQemu, "migrate-incoming: " + inc.error().message});
  auto done = co_await sb.qmp->WaitEvent("MIGRATION", config_.restore_timeout, [](const json& d) {
    std::string st = d.value("status", "");
    return st == "completed" || st == "failed" || st == "cancelled";
  });
  if (!done) co_return std::unexpected(VmError{VmError::Code::kQemu, "restore did not complete: " + done.error().message});
  std::string status = (*done)["data"].value("status", "");
  if (status != "completed") {
    auto q = co_await sb.qmp->Execute("query-migrate", json::object(), 2s);
    co_return std::unexpected(VmError{VmError::Code::kQemu,
                                      fmt::format("restore {}: {}", status, q ? q->value("error-desc", "") : "")});
  }
  // The template was saved stopped, so the guest waits for us.
  auto cont = co_await sb.qmp->Execute("cont");
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
    auto pong = co_await sb.agent->Call(std::move(ping), 2s);
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
        r = co_await sb.agent->SetClockNow(10s);
      else
        r = co_await sb.agent->ReseedFromHost(10s);
      if (r) co_return std::expected<void, VmError>{};
      if (attempt > 0 || r.error().code != AgentError::Code::kTimeout)
        co_return std::unexpected(VmError{VmError::Code::kAgent, fmt::format("{}: {}", what, r.error().message)});
      log::Warn(kLog, "slot {}: the agent did not answer {}; pinging it", sb.slot, what);
      if (auto p = co_await PingAgent(sb, 20s); !p) co_return p;
    }
  };
  // Both requests are in flight at once: the agent answers each as it is done, and a warm
  // hand-out is then one round trip to a guest that has to wake up for it.
  auto [clock, reseed] = co_await (step("set clock", true) && step("reseed", false));
  if (!clock) co_return clock;
  co_return reseed;
}

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
  auto gone = [&] { return sb.state == SandboxState::kStopped || sb.state == SandboxState::kFailed; };
  auto gone_error = [&] {
    return std::unexpected(VmError{VmError::Code::kInvalidState,
                                   fmt::format("sandbox {} is {}", sb.id, ToString(sb.state))});
  };
  for (int round = 1;; ++round) {
    if (gone()) co_return gone_error();
    agent::v1::Request req;
    req.mutable_exec()->add_argv("/usr/lib/deskbox/refresh-browser");
    // Quick normally; under emulation with other guests restoring it has taken over 30 s.
    req.mutable_exec()->set_timeout_s(120);
    auto r = co_await sb.agent->Call(std::move(req), 130s);
    if (gone()) co_return gone_error();
    if (!r) co_return std::unexpected(VmError{VmError::Code::kAgent, "refresh-browser: " + r.error().message});
    if (r->exec().exit_code() != 0)
      co_return std::unexpected(VmError{VmError::Code::kGuest,
                                        fmt::format("refresh-browser exited {}: {}", r->exec().exit_code(),
                                                    r->exec().stderr().substr(0, 200))});
    auto t_script = std::chrono::steady_clock::now();
    auto ready = co_await WaitGuestServices(sb.slot, config_.ready_timeout);
    if (gone()) co_return gone_error();
    if (!ready) co_return ready;
    auto t_services = std::chrono::steady_clock::now();
    // A loaded host (a compile beside two guests) has made /json/list take over 5 s.
    auto round_end = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(45));
    auto left = [&] {
      return std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(round_end - std::chrono::steady_clock::now()),
                        1000ms, 15000ms);
    };
    auto pages = co_await GuestPageIds(sb.slot, 15s);
    if (!pages) {
      last = pages.error().message;
    } else if (pages->empty()) {
      // No window left (never in a template the builder made): open the start page.
      auto opened = co_await GuestHttp(sb.slot, "PUT", "/json/new", 15s);
      if (!opened) last = opened.error().message;
    } else {
      for (const auto& [id, url] : *pages)
        if (auto reload = co_await GuestPageCall(sb.slot, id, "Page.reload", json::object(), left()); !reload)
          last = reload.error().message;
    }
    auto t_reload = std::chrono::steady_clock::now();
    // Done when every page has loaded something and runs script. While a page's new renderer
    // starts, its evaluation waits or fails; ask again until the round ends.
    bool fresh = false;
    while (!fresh && std::chrono::steady_clock::now() < round_end) {
      if (gone()) co_return gone_error();
      pages = co_await GuestPageIds(sb.slot, 15s);
      if (pages && !pages->empty()) {
        fresh = true;
        for (const auto& [id, url] : *pages) {
          if (url.empty()) {
            last = "a page has not loaded";
          } else if (auto runs = co_await GuestPageEvaluates(sb.slot, id, left()); !runs) {
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
               sb.slot, round, ms(t_script - t0), ms(t_services - t_script), ms(t_reload - t_services),
               ms(std::chrono::steady_clock::now() - t_reload));
    if (fresh) break;
    if (round >= 3 || std::chrono::steady_clock::now() >= deadline)
      co_return std::unexpected(VmError{VmError::Code::kTimeout,
                                        fmt::format("slot {}: the browser did not reload its pages: {}", sb.slot, last)});
    log::Warn(kLog, "slot {}: refreshing the browser again ({})", sb.slot, last);
  }
  log::Debug(kLog, "slot {}: browser refreshed in {:.0f} ms", sb.slot, ms(std::chrono::steady_clock::now() - t0));
  co_return std::expected<void, VmError>{};
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
    uint32_t slot, std::chrono::milliseconds timeout) {
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

void SandboxManager::WatchQemu(const std::shared_ptr<Sandbox>& sb) {
  std::weak_ptr<Sandbox> weak = sb;
  auto alive = alive_;
  sb->pidfd->async_wait(asio::posix::descriptor_base::wait_read,
                        [this, weak, alive](boost::system::error_code ec) {
                          if (ec || !*alive) return;
                          auto s = weak.lock();
                          if (!s || s->state == SandboxState::kStopped) return;
                          asio::co_spawn(executor_, [this, s]() -> asio::awaitable<void> {
                            log::Warn(kLog, "sandbox {} (slot {}): QEMU pid {} exited", s->id, s->slot, s->qemu_pid);
                            s->failure = "QEMU exited unexpectedly";
                            co_await Transition(*s, SandboxState::kFailed);
                          }, asio::detached);
                        });
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Transition(Sandbox& sb, SandboxState to) {
  if (!CanTransition(sb.state, to))
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; cannot become {}", sb.id,
                                                  ToString(sb.state), ToString(to))});
  SandboxState from = sb.state;
  sb.state = to;
  if (to == SandboxState::kFailed || to == SandboxState::kStopped) {
    // Release everything on the host at once; a failed sandbox keeps only its record.
    if (sb.qmp) sb.qmp->Close();
    if (sb.agent) sb.agent->Close();
    if (sb.pidfd) {
      boost::system::error_code ec;
      sb.pidfd->close(ec);
    }
    if (from != SandboxState::kFailed) co_await ReleaseSlot(sb.slot);
    for (auto& w : sb.browser_waiters) w->cancel();  // they see the state and give up
  }
  if (to == SandboxState::kStopped) sandboxes_.erase(sb.id);
  if (observer_) observer_(sb, from);
  co_return std::expected<void, VmError>{};
}

void SandboxManager::RefreshInBackground(const std::shared_ptr<Sandbox>& sb) {
  sb->browser_refreshing = true;
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
            (sb->state == SandboxState::kRunning || sb->state == SandboxState::kPaused)) {
          co_await self->LogGuestState(*sb, r.error().message);
          if (!*alive) co_return;
          sb->browser_failure = r.error().message;
          sb->failure = "the browser did not restart after the restore: " + r.error().message;
          if (sb->state == SandboxState::kRunning || sb->state == SandboxState::kPaused)
            co_await self->Transition(*sb, SandboxState::kFailed);
          if (!*alive) co_return;
        } else if (!r) {
          sb->browser_failure = r.error().message;
        } else {
          log::Debug(kLog, "sandbox {}: pages fresh {:.0f} ms after hand-out", sb->id,
                     std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        }
        sb->browser_refreshing = false;
        for (auto& w : sb->browser_waiters) w->cancel();
        sb->browser_waiters.clear();
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
  while (sb->browser_refreshing && sb->state != SandboxState::kStopped && sb->state != SandboxState::kFailed) {
    if (std::chrono::steady_clock::now() >= deadline)
      co_return std::unexpected(VmError{VmError::Code::kTimeout,
                                        fmt::format("sandbox {}: its browser is still reloading its pages after the "
                                                    "restore ({} ms waited)", sb->id, timeout.count())});
    auto t = std::make_shared<asio::steady_timer>(executor_);
    t->expires_at(deadline);
    sb->browser_waiters.push_back(t);
    boost::system::error_code ec;
    co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    std::erase(sb->browser_waiters, t);
  }
  if (sb->state == SandboxState::kStopped)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState, fmt::format("sandbox {} is stopped", sb->id)});
  if (!sb->browser_failure.empty())
    co_return std::unexpected(VmError{VmError::Code::kGuest, "the browser did not restart after the restore: " +
                                                                 sb->browser_failure});
  if (sb->state == SandboxState::kFailed)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} failed: {}", sb->id, sb->failure)});
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
  req.mutable_set_slot_priority()->set_slot(sb.slot);
  req.mutable_set_slot_priority()->set_background(background);
  // Best effort: a sandbox at the wrong priority still works.
  if (auto r = co_await CallJailer(jailer_, std::move(req)); !r)
    log::Warn(kLog, "slot {}: priority: {}", sb.slot, r.error().message);
}

asio::awaitable<void> SandboxManager::LogGuestState(Sandbox& sb, std::string_view why) {
  if (!sb.agent) co_return;
  agent::v1::Request req;
  auto* e = req.mutable_exec();
  e->add_argv("/bin/sh");
  e->add_argv("-c");
  e->add_argv("tail -n 15 /run/deskbox/log/chromium.log 2>&1; echo; pgrep -c chromium; cat /proc/loadavg");
  e->set_timeout_s(10);
  auto r = co_await sb.agent->Call(std::move(req), 15s);
  std::string out = r ? r->exec().stdout().substr(0, 2000) : "agent: " + r.error().message;
  log::Warn(kLog, "slot {}: {}; guest state: {}", sb.slot, why, out);
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
      auto slot = co_await TakeNetworkSlot();
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
  sb->id = NewId();
  sb->path = path;
  sb->created_at = std::chrono::system_clock::now();
  sb->state = SandboxState::kCreating;
  sandboxes_[sb->id] = sb;
  WatchQemu(sb);
  auto fail = [&](VmError e) -> asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> {
    if (e.code == VmError::Code::kTimeout || e.code == VmError::Code::kGuest) co_await LogGuestState(*sb, e.message);
    sb->failure = e.message;
    if (sb->state != SandboxState::kFailed) co_await Transition(*sb, SandboxState::kFailed);
    sandboxes_.erase(sb->id);  // no client has seen its id
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
    log::Debug(kLog, "slot {}: restored in {:.0f} ms", sb->slot,
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
  log::Debug(kLog, "slot {}: hand-out took {:.0f} ms", sb->slot,
             std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_restored).count());
  if (sb->state != SandboxState::kCreating)
    co_return std::unexpected(VmError{VmError::Code::kQemu, "sandbox failed while starting: " + sb->failure});
  co_await Transition(*sb, SandboxState::kRunning);
  // The desktop, the agent and the browser process answer now; the pages reload in new
  // renderers while the client goes on (under emulation that is seconds of a cold translation
  // cache). Whatever talks to a page waits for it: WaitBrowserFresh.
  if (path != CreatePath::kWarm) RefreshInBackground(sb);
  log::Info(kLog, "sandbox {} running in slot {} ({})", sb->id, sb->slot, ToString(path));
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
  if (!CanTransition(sb->state, SandboxState::kPaused) || sb->state == SandboxState::kCreating)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; only a running sandbox can be paused",
                                                  id, ToString(sb->state))});
  // Stopped vCPUs would stall a browser refresh still under way into a failure.
  if (auto fresh = co_await WaitBrowserFresh(sb, 3 * config_.ready_timeout); !fresh) co_return fresh;
  if (sb->state != SandboxState::kRunning)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; only a running sandbox can be paused", id,
                                                  ToString(sb->state))});
  auto r = co_await sb->qmp->Execute("stop");
  if (!r) co_return std::unexpected(VmError{VmError::Code::kQemu, "stop: " + r.error().message});
  co_return co_await Transition(*sb, SandboxState::kPaused);
}

asio::awaitable<std::expected<void, VmError>> SandboxManager::Resume(const std::string& id) {
  auto sb = Find(id);
  if (!sb) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
  if (sb->state != SandboxState::kPaused)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState,
                                      fmt::format("sandbox {} is {}; only a paused sandbox can be resumed",
                                                  id, ToString(sb->state))});
  auto r = co_await sb->qmp->Execute("cont");
  if (!r) co_return std::unexpected(VmError{VmError::Code::kQemu, "cont: " + r.error().message});
  auto t = co_await Transition(*sb, SandboxState::kRunning);
  if (!t) co_return t;
  auto h = co_await HandOut(*sb);  // the clock stood still while paused
  if (!h) co_return std::unexpected(h.error());
  if (sb->refresh_on_resume) {
    sb->refresh_on_resume = false;
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
  PoolStats s{netns_ready_.size(), prestarted_.size(), warm_.size(), sandboxes_.size(), free_slots_.size()};
  s.refreshes_running = refresh_turns_;
  s.refreshes_waiting = refresh_queue_.size();
  for (const auto& [id, sb] : sandboxes_) s.trimmed += sb->state == SandboxState::kRunning && sb->idle_trim.trimmed() && sb->idle_trim.trims() > 0;
  s.trims_total = trims_total_;
  return s;
}

asio::awaitable<bool> SandboxManager::WaitPoolsFull(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (netns_ready_.size() >= config_.netns_pool && prestarted_.size() >= config_.prestart_pool &&
        warm_.size() >= config_.warm_pool && !refilling_)
      co_return true;
    co_await Sleep(20ms);
  }
  co_return false;
}

asio::awaitable<std::expected<TrimStats, VmError>> SandboxManager::Trim(Sandbox& sb, uint64_t above_kib) {
  jailer::v1::Request req;
  req.mutable_trim_translation_cache()->set_slot(sb.slot);
  req.mutable_trim_translation_cache()->set_above_kib(above_kib);
  sb.idle_trim.Asked(std::chrono::steady_clock::now());
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) co_return std::unexpected(r.error());
  const auto& t = r->response.trim();
  sb.idle_trim.Answered(std::chrono::steady_clock::now(), t.trimmable());
  if (t.trimmable()) ++trims_total_;
  co_return TrimStats{t.trimmable(), t.resident_before_kib()};
}

asio::awaitable<std::expected<TrimStats, VmError>> SandboxManager::TrimTranslationCache(const std::string& id,
                                                                                       uint64_t above_kib) {
  auto sb = Find(id);
  if (!sb) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
  // Not a paused one: its vCPUs idle only once it is resumed, and it would be trimmed just as
  // it is used again.
  if (sb->state != SandboxState::kRunning)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState, fmt::format("sandbox {} is {}", id, ToString(sb->state))});
  co_return co_await Trim(*sb, above_kib);
}

namespace {
// utime + stime of a process, in seconds; negative if it cannot be read.
double ProcessCpuSeconds(int pid) {
  auto s = ReadFile(fmt::format("/proc/{}/stat", pid), 4096);
  if (!s) return -1;
  size_t close = s->rfind(')');
  if (close == std::string::npos) return -1;
  // Fields after the command: state is the 1st, utime the 12th, stime the 13th.
  std::istringstream in(s->substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 1; i <= 13 && in >> field; ++i)
    if (i >= 12) ticks += std::strtod(field.c_str(), nullptr);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}
}  // namespace

void SandboxManager::StartTrimLoop() {
  if (trim_loop_running_ || accelerator_ != "tcg" || config_.trim_idle_after.count() == 0) return;
  trim_loop_running_ = true;
  asio::co_spawn(executor_, TrimLoop(alive_), asio::detached);
}

void SandboxManager::SetIdleTrim(std::chrono::seconds after, uint32_t regrown_mib) {
  config_.trim_idle_after = after;
  config_.trim_regrown_mib = regrown_mib;
  if (refill_started_) StartTrimLoop();
}

asio::awaitable<void> SandboxManager::TrimLoop(std::shared_ptr<bool> alive) {
  while (true) {
    if (config_.trim_idle_after.count() == 0) {  // turned off (SetIdleTrim)
      trim_loop_running_ = false;
      co_return;
    }
    co_await Sleep(std::min<std::chrono::milliseconds>(std::chrono::seconds(5), config_.trim_idle_after));
    if (!*alive || shutting_down_) co_return;
    // Not the warm pool's: a trimmed spare would be handed out with its code still to translate,
    // which is what the warm pool is there to have done already.
    std::vector<std::shared_ptr<Sandbox>> candidates;
    for (auto& [id, sb] : sandboxes_) candidates.push_back(sb);
    auto now = std::chrono::steady_clock::now();
    const IdleTrimRules rules{config_.trim_idle_after, config_.trim_idle_cpu,
                              config_.trim_regrown_mib};
    for (auto& sb : candidates) {
      if (sb->state != SandboxState::kRunning || sb->qemu_pid <= 0) continue;
      double cpu = ProcessCpuSeconds(sb->qemu_pid);
      if (cpu < 0) continue;
      // A browser reloading its pages is busy whatever the CPU says: it is about to run code. So
      // is one a client is connected to, as far as trimming goes: its next input may come any
      // moment, and the delay starts again when the client leaves.
      bool busy = sb->browser_refreshing || (in_use_ && in_use_(sb->id));
      auto trim = sb->idle_trim.Look(now, cpu, busy, rules);
      if (!trim) continue;
      uint64_t above_kib = *trim;
      auto r = co_await Trim(*sb, above_kib);
      if (!*alive) co_return;
      if (!r) {
        log::Warn(kLog, "slot {}: trimming its translation cache: {}", sb->slot, r.error().message);
        sb->idle_trim.Answered(std::chrono::steady_clock::now(), false);
      } else if (r->trimmable) {
        log::Debug(kLog, "slot {}: idle, trimming its translation cache ({} MiB in memory)",
                   sb->slot, r->resident_before_kib >> 10);
      } else if (above_kib > 0) {
        log::Debug(kLog, "slot {}: idle, translation cache {} MiB, under the {} MiB mark", sb->slot,
                   r->resident_before_kib >> 10, above_kib >> 10);
      }
    }
  }
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
        auto slot = co_await TakeNetworkSlot();
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
          if (!r) log::Warn(kLog, "pool: warm restore in slot {}: {}", sb->slot, r.error().message);
          sb->qmp->Close();
          sb->agent->Close();
          co_await ReleaseSlot(sb->slot);
          failed = !r.has_value();
        }
      }
    } else if (prestarted_.size() < config_.prestart_pool) {
      auto slot = co_await TakeNetworkSlot();
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
    } else if (netns_ready_.size() < config_.netns_pool && !free_slots_.empty()) {
      uint32_t slot = *free_slots_.begin();
      free_slots_.erase(free_slots_.begin());
      jailer::v1::Request req;
      req.mutable_create_slot()->set_slot(slot);
      auto r = co_await CallJailer(jailer_, std::move(req));
      if (!*alive) co_return;
      if (r) {
        netns_ready_.push_back(slot);
        progress = true;
      } else {
        log::Warn(kLog, "pool: slot {}: {}", slot, r.error().message);
        free_slots_.insert(slot);
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
      if (sb->qmp) sb->qmp->Close();
      if (sb->agent) sb->agent->Close();
      if (sb->pidfd) {
        boost::system::error_code ec;
        sb->pidfd->close(ec);
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
    sb->qmp->Close();
    sb->agent->Close();
    co_await ReleaseSlot(sb->slot);
  }
  while (!prestarted_.empty()) {
    auto sb = prestarted_.front();
    prestarted_.pop_front();
    sb->qmp->Close();
    sb->agent->Close();
    co_await ReleaseSlot(sb->slot);
  }
  while (!netns_ready_.empty()) {
    uint32_t s = netns_ready_.front();
    netns_ready_.pop_front();
    co_await ReleaseSlot(s);
  }
}

}  // namespace deskbox::vmhost
