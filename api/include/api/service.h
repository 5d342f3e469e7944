#pragma once
// ApiService: deskboxd's REST API (api/openapi.yaml), put together. It owns one object per role
// and wires them; each role registers its routes with the Router and, when state changes concern
// it, subscribes to the SandboxRegistry:
//
//   Router            route table, authentication, scopes (router.h)
//   SandboxRegistry   records, the one state transition, per-sandbox ordering (sandbox_registry.h)
//   LifecycleRoutes   templates, create, list, get, patch, delete, pause, resume, recovery
//   TimeoutClock      timeout_s / on_timeout
//   GuestRoutes       exec, files, clipboard
//   DesktopRoutes     screenshot, actions, cursor, model tool adapters
//   ViewerRoutes      the live view (noVNC)
//   CdpRoutes         CDP for Playwright / Puppeteer
//   EgressBinding     each sandbox's egress policy
//   AccessRoutes      API keys and sandbox tokens
//   EventRoutes       the timeline
//   ScreenMirrors     one screen mirror per running sandbox (desktop routes, recorder)
//   RecordingRoutes   screen recording, its segments and verification, the replay page
// and answers /healthz and /metrics itself.
//
// Threads: everything on the io_context thread; event-log flushes on a helper thread.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <memory>
#include <optional>
#include <string>

#include "api/clock.h"
#include "api/config.h"
#include "api/credentials.h"
#include "api/http_server.h"
#include "api/metrics.h"
#include "api/router.h"
#include "api/sandbox_registry.h"
#include "api/store.h"
#include "recorder/log_event_sink.h"
#include "vmhost/sandbox_host.h"

namespace deskbox::api {

struct ApiContext;
class LifecycleRoutes;
class TimeoutClock;
class GuestRoutes;
class DesktopRoutes;
class ViewerRoutes;
class CdpRoutes;
class EgressBinding;
class AccessRoutes;
class EventRoutes;
class ScreenMirrors;
class RecordingRoutes;

class ApiService {
 public:
  ApiService(boost::asio::any_io_executor executor, vmhost::SandboxHost& manager, Store& store,
             recorder::LogEventSink& events, DaemonConfig config);
  // With the clock it reads (tests advance a fake one).
  ApiService(boost::asio::any_io_executor executor, vmhost::SandboxHost& manager, Store& store,
             recorder::LogEventSink& events, DaemonConfig config, const Clock& clock);
  ~ApiService();

  // Loads records and credentials. Returns a newly generated API key to print once, if any.
  std::expected<std::optional<std::string>, std::string> Load();
  // Re-adopts the sandboxes of a previous process (or marks them failed), then starts the
  // timeout clock.
  boost::asio::awaitable<void> Recover();
  boost::asio::awaitable<HttpResponse> Handle(Exchange& ex) { return router_.Handle(ex); }
  // Stops the clock; destroys sandboxes only when the config says so (else they wait for the
  // next start).
  boost::asio::awaitable<void> Shutdown();
  const Router& router() const { return router_; }

 private:
  Reply Health(Call& c);
  Reply GetMetrics(Call& c);

  vmhost::SandboxHost& manager_;
  DaemonConfig config_;
  SystemClock system_clock_;
  const Clock& clock_;
  Credentials credentials_;
  Metrics metrics_;
  SandboxRegistry sandboxes_;
  std::unique_ptr<ApiContext> ctx_;
  std::unique_ptr<EgressBinding> egress_;
  std::unique_ptr<LifecycleRoutes> lifecycle_;
  std::unique_ptr<TimeoutClock> timeouts_;
  std::unique_ptr<ScreenMirrors> mirrors_;
  std::unique_ptr<RecordingRoutes> recordings_;
  std::unique_ptr<GuestRoutes> guest_;
  std::unique_ptr<DesktopRoutes> desktop_;
  std::unique_ptr<ViewerRoutes> viewers_;
  std::unique_ptr<CdpRoutes> cdp_;
  std::unique_ptr<AccessRoutes> access_;
  std::unique_ptr<EventRoutes> events_;
  Router router_;
};

}  // namespace deskbox::api
