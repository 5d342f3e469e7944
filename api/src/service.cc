#include "api/service.h"

#include <fmt/format.h>

#include "access_routes.h"
#include "api_context.h"
#include "cdp_routes.h"
#include "common/log.h"
#include "desktop_routes.h"
#include "egress_binding.h"
#include "event_routes.h"
#include "guest_routes.h"
#include "lifecycle_routes.h"
#include "recording_routes.h"
#include "screen_mirrors.h"
#include "recorder/event_json.h"
#include "timeout_clock.h"
#include "viewer_routes.h"

namespace deskbox::api {

namespace asio = boost::asio;
using boost::beast::http::verb;
using vmhost::SandboxState;

HttpResponse FromVmError(const vmhost::VmError& e) {
  using C = vmhost::VmError::Code;
  switch (e.code) {
    case C::kNotFound:
      return Error(404, "not_found", e.message);
    case C::kInvalidState:
      return Error(409, "invalid_state", e.message);
    case C::kCapacity:
      return Error(429, "sandbox_limit", e.message);
    case C::kTimeout:
      return Error(504, "guest_timeout", e.message);
    case C::kAgent:
    case C::kGuest:
      return Error(502, "guest_error", e.message);
    case C::kJailer:
    case C::kQemu:
      return Error(500, "internal", e.message);
  }
  return Error(500, "internal", e.message);
}

HttpResponse FromStoreError(const StoreError& e) {
  if (e.code == StoreError::Code::kFull)
    return Error(507, "insufficient_storage",
                 fmt::format("deskboxd's state disk is full, nothing was changed; retry once there is "
                             "room ({})",
                             e.message));
  return Error(500, "internal", e.message);
}

cdp_proxy::Error ToCdpError(vmhost::VmError e) {
  using C = vmhost::VmError::Code;
  using cdp_proxy::ErrorCode;
  ErrorCode code = ErrorCode::kIo;
  if (e.code == C::kTimeout)
    code = ErrorCode::kTimeout;
  else if (e.code == C::kGuest)
    code = ErrorCode::kGuest;
  else if (e.code == C::kNotFound || e.code == C::kInvalidState)
    code = ErrorCode::kClosed;
  return {code, std::move(e.message)};
}

vnc_bridge::Error ToScreenError(vmhost::VmError e) {
  using C = vmhost::VmError::Code;
  using vnc_bridge::ErrorCode;
  ErrorCode code = ErrorCode::kIo;
  if (e.code == C::kTimeout)
    code = ErrorCode::kTimeout;
  else if (e.code == C::kNotFound || e.code == C::kInvalidState)
    code = ErrorCode::kClosed;
  return {code, std::move(e.message)};
}

egress::Error ToEgressError(vmhost::VmError e) {
  return {e.code == vmhost::VmError::Code::kTimeout ? egress::ErrorCode::kTimeout
                                                    : egress::ErrorCode::kIo,
          std::move(e.message)};
}

HttpResponse FromAgentError(const vmhost::AgentError& e, bool file) {
  using C = vmhost::AgentError::Code;
  if (e.code == C::kTimeout) return Error(504, "guest_timeout", e.message);
  if (file) {
    switch (vmhost::RefusalOf(e)) {
      case vmhost::GuestRefusal::kInvalidArgument:
        return Error(400, "invalid_path", e.message);
      case vmhost::GuestRefusal::kNotFound:
        return Error(404, "file_not_found", e.message);
      case vmhost::GuestRefusal::kTooLarge:
        return Error(413, "payload_too_large", e.message);
      case vmhost::GuestRefusal::kTimeout:
        return Error(504, "guest_timeout", e.message);
      case vmhost::GuestRefusal::kOther:
        break;
    }
  }
  return Error(502, "guest_error", e.message);
}

std::string Rfc3339(int64_t ms) {
  return recorder::FormatTimeRfc3339(ms * 1000000);
}

ApiService::ApiService(asio::any_io_executor executor, vmhost::SandboxHost& manager, Store& store,
                       recorder::LogEventSink& events, DaemonConfig config)
    : ApiService(executor, manager, store, events, std::move(config), system_clock_) {}

ApiService::ApiService(asio::any_io_executor executor, vmhost::SandboxHost& manager,
                       Store& store, recorder::LogEventSink& events, DaemonConfig config, const Clock& clock)
    : manager_(manager),
      config_(std::move(config)),
      clock_(clock),
      credentials_(store),
      sandboxes_(executor, store, events, clock_),
      ctx_(std::make_unique<ApiContext>(ApiContext{executor, manager, sandboxes_, credentials_,
                                                   events, metrics_, config_, clock_})),
      egress_(std::make_unique<EgressBinding>(*ctx_)),
      lifecycle_(std::make_unique<LifecycleRoutes>(*ctx_, *egress_)),
      timeouts_(std::make_unique<TimeoutClock>(*ctx_)),
      mirrors_(std::make_unique<ScreenMirrors>(*ctx_)),
      recordings_(std::make_unique<RecordingRoutes>(*ctx_, *mirrors_)),
      guest_(std::make_unique<GuestRoutes>(*ctx_)),
      desktop_(std::make_unique<DesktopRoutes>(*ctx_, *mirrors_)),
      viewers_(std::make_unique<ViewerRoutes>(*ctx_)),
      cdp_(std::make_unique<CdpRoutes>(*ctx_)),
      access_(std::make_unique<AccessRoutes>(
          *ctx_,
          [this](const std::string& token) {
            viewers_->bridge().CloseActor(token, "the token was revoked");
            cdp_->proxy().CloseActor(token, "the token was revoked");
          })),
      events_(std::make_unique<EventRoutes>(*ctx_)),
      router_(credentials_, metrics_, clock_) {
  // Who hears of state changes: live connections end, mirrors stop, egress detaches.
  sandboxes_.Subscribe(cdp_.get());
  sandboxes_.Subscribe(viewers_.get());
  sandboxes_.Subscribe(recordings_.get());
  sandboxes_.Subscribe(mirrors_.get());
  sandboxes_.Subscribe(egress_.get());
  events_->SetStillWriting([this](const std::string& id) { return recordings_->Finishing(id); });
  // A sandbox with a live view or a CDP session open is not trimmed, however idle.
  manager_.SetInUse([this](const std::string& id) {
    return cdp_->proxy().Sessions(id) > 0 || viewers_->bridge().Viewers(id) > 0;
  });
  router_.Add({.method = verb::get,
               .pattern = "/healthz",
               .access = Access::Open(),
               .handler = [this](Call& c) { return Health(c); }});
  lifecycle_->Register(router_);
  guest_->Register(router_);
  events_->Register(router_);
  recordings_->Register(router_);
  desktop_->Register(router_);
  viewers_->Register(router_);
  egress_->Register(router_);
  access_->Register(router_);
  router_.Add({.method = verb::get,
               .pattern = "/metrics",
               .access = Access::KeysOnly(),
               .handler = [this](Call& c) { return GetMetrics(c); }});
  cdp_->Register(router_);
}

ApiService::~ApiService() {
  manager_.SetInUse(nullptr);
  timeouts_->Stop();
  events_->Stop();
}

std::expected<std::optional<std::string>, std::string> ApiService::Load() {
  if (auto r = credentials_.Load(); !r) return std::unexpected(r.error());
  if (auto r = sandboxes_.Load(); !r) return std::unexpected(r.error());
  return credentials_.EnsureBootstrapKey(config_.api_key, config_.state_dir + "/api-key",
                                         clock_.NowMs());
}

asio::awaitable<void> ApiService::Recover() {
  co_await lifecycle_->Recover();
  recordings_->Start();
  timeouts_->Start();
}

asio::awaitable<void> ApiService::Shutdown() {
  timeouts_->Stop();
  events_->Stop();
  for (const auto& [id, r] : sandboxes_.records()) {
    cdp_->proxy().CloseSandbox(id, "deskboxd is stopping");
    viewers_->bridge().CloseSandbox(id, "deskboxd is stopping");
  }
  co_await recordings_->Shutdown();
  mirrors_->StopAll();
  if (config_.destroy_on_exit) co_await lifecycle_->DestroyAll();
  co_await manager_.Shutdown(/*keep_sandboxes=*/!config_.destroy_on_exit);
  co_await events_->Flush();
}

Reply ApiService::Health(Call&) {
  co_return Json(200, {{"status", "ok"}});
}

Reply ApiService::GetMetrics(Call&) {
  std::map<std::string, Metrics::Gauge> g;
  auto& states = g["deskbox_sandboxes"];
  states.help = "Sandboxes by state (stopped ones are kept as records).";
  for (auto s : {SandboxState::kCreating, SandboxState::kRunning, SandboxState::kPaused,
                 SandboxState::kFailed, SandboxState::kStopped}) {
    double n = 0;
    for (const auto& [id, r] : sandboxes_.records()) n += r.state == s;
    if (s == SandboxState::kCreating) n += static_cast<double>(lifecycle_->creating());
    states.samples.emplace_back(fmt::format("state=\"{}\"", vmhost::ToString(s)), n);
  }
  auto st = manager_.Stats();
  auto& pools = g["deskbox_pool_size"];
  pools.help = "VMs and network slots waiting in each pool.";
  pools.samples = {{"pool=\"warm\"", static_cast<double>(st.warm)},
                   {"pool=\"prestarted\"", static_cast<double>(st.prestarted)},
                   {"pool=\"netns\"", static_cast<double>(st.netns_ready)}};
  g["deskbox_free_slots"] = {"Network slots not in use.",
                             {{"", static_cast<double>(st.free_slots)}}};
  auto& refreshes = g["deskbox_browser_refreshes"];
  refreshes.help = "Browser refreshes after hand-outs: running, and waiting for a turn.";
  refreshes.samples = {{"state=\"running\"", static_cast<double>(st.refreshes_running)},
                       {"state=\"waiting\"", static_cast<double>(st.refreshes_waiting)}};
  g["deskbox_sandboxes_trimmed"] = {
      "Running sandboxes idle with their translation cache handed back (TCG).",
      {{"", static_cast<double>(st.trimmed)}}};
  auto es = ctx_->events.stats();
  g["deskbox_events_written"] = {"Events appended to sandbox logs since start.",
                                 {{"", static_cast<double>(es.written)}}};
  g["deskbox_events_dropped"] = {
      "Events dropped (queue full, invalid, too large) since start.",
      {{"",
        static_cast<double>(es.dropped_queue_full + es.dropped_invalid + es.dropped_too_large)}}};
  g["deskbox_events_write_errors"] = {
      "Events that could not be appended to their log (a full disk, an I/O error) since start; "
      "the log stays valid without them.",
      {{"", static_cast<double>(es.write_errors)}}};
  g["deskbox_state_unsaved_sandboxes"] = {
      "Sandboxes whose last state change could not be written to the state database (a full "
      "disk); written again once there is room.",
      {{"", static_cast<double>(sandboxes_.unsaved())}}};
  g["deskbox_cdp_sessions"] = {"Open CDP WebSocket sessions.",
                               {{"", static_cast<double>(cdp_->proxy().TotalSessions())}}};
  auto rt = recordings_->totals();
  g["deskbox_recordings_active"] = {"Sandboxes whose screen is being recorded now.",
                                    {{"", static_cast<double>(rt.recording)}}};
  g["deskbox_recording_bytes"] = {"Bytes of all recordings on disk.",
                                  {{"", static_cast<double>(rt.bytes)}}};
  HttpResponse res;
  res.content_type = "text/plain; version=0.0.4; charset=utf-8";
  res.body = metrics_.Render(g);
  res.body += fmt::format(
      "# HELP deskbox_translation_cache_trims_total Idle sandboxes' translation caches handed back "
      "to the host (TCG).\n"
      "# TYPE deskbox_translation_cache_trims_total counter\n"
      "deskbox_translation_cache_trims_total {}\n",
      st.trims_total);
  res.body +=
      "# HELP deskbox_cdp_messages_total CDP messages from clients to browsers, by method.\n"
      "# TYPE deskbox_cdp_messages_total counter\n";
  for (const auto& [method, n] : cdp_->proxy().method_counts())
    res.body +=
        fmt::format("deskbox_cdp_messages_total{{method=\"{}\"}} {}\n", LabelValue(method), n);
  res.body += fmt::format(
      "# HELP deskbox_recording_failures_total Recordings stopped by a failure (disk full, quota, "
      "encoder) while their sandbox went on.\n"
      "# TYPE deskbox_recording_failures_total counter\n"
      "deskbox_recording_failures_total {}\n"
      "# HELP deskbox_recording_segments_total Recording segments finished since start.\n"
      "# TYPE deskbox_recording_segments_total counter\n"
      "deskbox_recording_segments_total {}\n"
      "# HELP deskbox_recording_dropped_frames_total Screen frames the encoders could not keep up "
      "with.\n"
      "# TYPE deskbox_recording_dropped_frames_total counter\n"
      "deskbox_recording_dropped_frames_total {}\n",
      rt.failures, rt.segments, rt.dropped_frames);
  const auto& ec = egress_->egress().counters();
  res.body += fmt::format(
      "# HELP deskbox_egress_dns_queries_total DNS queries from guests, by outcome.\n"
      "# TYPE deskbox_egress_dns_queries_total counter\n"
      "deskbox_egress_dns_queries_total{{outcome=\"allowed\"}} {}\n"
      "deskbox_egress_dns_queries_total{{outcome=\"denied\"}} {}\n"
      "deskbox_egress_dns_queries_total{{outcome=\"rate_limited\"}} {}\n"
      "# HELP deskbox_egress_dns_upstream_failures_total Upstream resolutions that failed.\n"
      "# TYPE deskbox_egress_dns_upstream_failures_total counter\n"
      "deskbox_egress_dns_upstream_failures_total {}\n"
      "# HELP deskbox_egress_connections_total TCP connections from guests, by outcome.\n"
      "# TYPE deskbox_egress_connections_total counter\n"
      "deskbox_egress_connections_total{{outcome=\"allowed\"}} {}\n"
      "deskbox_egress_connections_total{{outcome=\"denied\"}} {}\n"
      "# HELP deskbox_egress_bytes_total Bytes through the egress proxy, by direction (counted "
      "when a connection ends).\n"
      "# TYPE deskbox_egress_bytes_total counter\n"
      "deskbox_egress_bytes_total{{direction=\"up\"}} {}\n"
      "deskbox_egress_bytes_total{{direction=\"down\"}} {}\n"
      "# HELP deskbox_egress_packets_refused_total Packets the sandboxes' firewalls refused and "
      "logged (UDP, ICMP, ...).\n"
      "# TYPE deskbox_egress_packets_refused_total counter\n"
      "deskbox_egress_packets_refused_total {}\n"
      "# HELP deskbox_egress_connections_open TCP connections through the egress proxy now.\n"
      "# TYPE deskbox_egress_connections_open gauge\n"
      "deskbox_egress_connections_open {}\n",
      ec.dns_allowed, ec.dns_denied, ec.dns_rate_limited, ec.dns_upstream_failures,
      ec.connections_allowed, ec.connections_denied, ec.bytes_up, ec.bytes_down, ec.packets_refused,
      egress_->egress().OpenConnections());
  co_return res;
}

}  // namespace deskbox::api
