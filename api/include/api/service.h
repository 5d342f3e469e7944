#pragma once
// ApiService: the REST API (api/openapi.yaml). It only translates: HTTP method + path + body →
// a typed call on vmhost's SandboxManager or the guest agent, and the result → JSON. It owns the
// records clients see (persisted in Store), authentication (Credentials), timeouts, metrics and
// the lifecycle/exec/file events it writes to the EventSink.
//
// Threads: everything on the io_context thread; event-log flushes on a helper thread.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "api/config.h"
#include "api/credentials.h"
#include "api/http_server.h"
#include "api/metrics.h"
#include "api/store.h"
#include "cdp_proxy/cdp_proxy.h"
#include "cdp_proxy/guest_json.h"
#include "egress/egress.h"
#include "recorder/log_event_sink.h"
#include "vmhost/sandbox_manager.h"
#include "vnc_bridge/input.h"
#include "vnc_bridge/mirror.h"
#include "vnc_bridge/viewer_bridge.h"

namespace deskbox::api {

inline constexpr size_t kMaxJsonBody = 1 << 20;             // bytes of a JSON request body
inline constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;  // upload / download size
inline constexpr size_t kMaxPathBytes = 4096;

struct GuestHttpAnswerJson {
  unsigned status = 0;
  std::string body;
};

class ApiService : private cdp_proxy::GuestDialer, private egress::UplinkSockets {
 public:
  ApiService(boost::asio::any_io_executor executor, vmhost::SandboxManager& manager, Store& store,
             recorder::LogEventSink& events, DaemonConfig config);
  ~ApiService();

  // Loads records and credentials. Returns a newly generated API key to print once, if any.
  std::expected<std::optional<std::string>, std::string> Load();
  // Re-adopts the sandboxes of a previous process (or marks them failed), then starts the pools
  // and the timeout clock.
  boost::asio::awaitable<void> Recover();
  boost::asio::awaitable<HttpResponse> Handle(Exchange& ex);
  // Stops the clock; destroys sandboxes only when the config says so (else they wait for the
  // next start).
  boost::asio::awaitable<void> Shutdown();

  struct Call;
  struct Route;

 private:
  static const std::vector<Route>& Routes();
  using Reply = boost::asio::awaitable<HttpResponse>;
  Reply Health(Call& c);
  Reply ListTemplates(Call& c);
  Reply CreateSandbox(Call& c);
  Reply ListSandboxes(Call& c);
  Reply GetSandbox(Call& c);
  Reply PatchSandbox(Call& c);
  Reply DeleteSandbox(Call& c);
  Reply PauseSandbox(Call& c);
  Reply ResumeSandbox(Call& c);
  Reply Exec(Call& c);
  Reply PutFile(Call& c);
  Reply GetFile(Call& c);
  Reply GetClipboard(Call& c);
  Reply PutClipboard(Call& c);
  Reply GetEvents(Call& c);
  Reply Screenshot(Call& c);
  Reply Actions(Call& c);
  Reply Cursor(Call& c);
  Reply ComputerAnthropic(Call& c);
  Reply ComputerOpenAi(Call& c);
  Reply GetEgress(Call& c);
  Reply PutEgress(Call& c);
  Reply CreateToken(Call& c);
  Reply ListTokens(Call& c);
  Reply DeleteToken(Call& c);
  Reply CreateKey(Call& c);
  Reply ListKeys(Call& c);
  Reply DeleteKey(Call& c);
  Reply GetMetrics(Call& c);
  Reply CdpVersion(Call& c);
  Reply CdpList(Call& c);
  Reply CdpNew(Call& c);
  Reply CdpActivate(Call& c);
  Reply CdpClose(Call& c);
  Reply CdpTargetAction(Call& c, std::string action, std::string answer);
  Reply CdpBrowser(Call& c);
  Reply CdpPage(Call& c);
  // The live view (viewer.cc).
  Reply ViewerSocket(Call& c);
  Reply ViewerPage(Call& c);
  Reply ViewerAsset(Call& c);
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, std::string>> DialRfb(const std::string& id);
  boost::asio::awaitable<std::expected<GuestHttpAnswerJson, HttpResponse>> CdpGuestJson(Call& c, boost::beast::http::verb m,
                                                                                     const std::string& target);
  cdp_proxy::PublicUrls CdpUrls(const Call& c) const;
  HttpResponse CdpWebSocket(Call& c, std::string guest_path);
  recorder::v1::Actor ActorOf(const Call& c) const;
  void EndCdpSessions(const std::string& id, const std::string& reason);

  // Helpers
  boost::asio::awaitable<std::expected<nlohmann::json, HttpResponse>> ReadJson(Call& c);
  std::expected<SandboxRecord*, HttpResponse> FindRecord(const std::string& id);
  std::expected<std::shared_ptr<vmhost::Sandbox>, HttpResponse> RunningSandbox(const std::string& id);
  nlohmann::json BrowserReadyJson(const SandboxRecord& r) const;
  nlohmann::json SandboxJson(const SandboxRecord& r) const;
  void Save(SandboxRecord& r);
  void EmitLifecycle(const SandboxRecord& r, const Call* c, std::string from, std::string to, std::string reason,
                     std::string detail = "");
  void FillActor(recorder::v1::Event& e, const Call* c) const;
  boost::asio::awaitable<void> FlushEvents();
  boost::asio::awaitable<void> TimeoutLoop(std::shared_ptr<bool> alive);
  boost::asio::awaitable<std::expected<void, std::string>> Resize(vmhost::Sandbox& sb, uint32_t w, uint32_t h);
  void OnTransition(const vmhost::Sandbox& sb, vmhost::SandboxState from);
  bool RateLimitAllows(double* retry_after_s);
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, std::string>> DialCdp(
      const std::string& sandbox_id) override;
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, std::string>> DialCdpVersion(
      const std::string& sandbox_id) override;
  size_t AliveCount() const;
  boost::asio::awaitable<std::expected<std::vector<UniqueFd>, std::string>> Open(bool ipv6, bool udp,
                                                                                unsigned count) override;
  // Serves the sandbox's egress sockets under `policy_json` (the stored canonical policy).
  boost::asio::awaitable<std::expected<void, std::string>> AttachEgress(const std::string& id, uint32_t slot,
                                                                      const std::string& policy_json);
  // The operator's default for a policy that gives none (--egress-default).
  egress::DefaultAction EgressDefault() const;
  // A sandbox's stored policy ("" when created before it had one: the operator's default).
  std::expected<egress::Policy, std::string> StoredPolicy(const std::string& egress_json) const;
  void DetachIfGone(const std::string& id);
  // The sandbox's screen mirror (desktop.cc), started on first use and stopped when the sandbox
  // leaves the running state.
  boost::asio::awaitable<std::expected<std::shared_ptr<vnc_bridge::FrameMirror>, HttpResponse>> ReadyMirror(
      const std::string& id);
  void StopMirror(const std::string& id);
  // The display a call works in: its own `display` (`asked`), else the one declared for the
  // sandbox (create or PATCH), else none (the screen's size).
  std::optional<std::pair<uint32_t, uint32_t>> EffectiveDisplay(
      const std::string& id, const std::optional<std::pair<uint32_t, uint32_t>>& asked) const;
  // Types text: keysyms, or the clipboard for characters the guest's X server has no spare
  // keycode for (desktop.cc says which).
  // A key action: its combos in order, a lone character beyond ASCII typed (pasted) instead.
  boost::asio::awaitable<std::expected<void, std::string>> PressKeys(Call& c, vnc_bridge::FrameMirror& m,
                                                                     const vnc_bridge::Action& action);
  boost::asio::awaitable<std::expected<void, std::string>> TypeText(Call& c, vnc_bridge::FrameMirror& m,
                                                                    const std::u32string& text);
  struct StepOutcome {
    size_t performed = 0;
    vnc_bridge::SettleResult settled;
    std::string failure;  // why an action could not be performed (the rest were not)
  };
  // Performs `actions` on the mirror in order, settles once after the last, writes one action
  // event per performed action (with `params[i]`, or `params` itself when not a list).
  boost::asio::awaitable<StepOutcome> PerformStep(Call& c, vnc_bridge::FrameMirror& m,
                                                  const std::vector<vnc_bridge::Action>& actions,
                                                  const nlohmann::json& params,
                                                  const std::optional<vnc_bridge::SettleOptions>& settle);

  boost::asio::any_io_executor executor_;
  vmhost::SandboxManager& manager_;
  Store& store_;
  recorder::LogEventSink& events_;
  DaemonConfig config_;
  Credentials credentials_;
  Metrics metrics_;
  cdp_proxy::CdpProxy cdp_;
  std::unique_ptr<vnc_bridge::ViewerBridge> viewers_;
  std::unique_ptr<egress::Egress> egress_;
  std::map<std::string, std::shared_ptr<vnc_bridge::FrameMirror>> mirrors_;
  std::map<std::string, SandboxRecord> records_;
  std::set<std::string> busy_;  // sandboxes with a pause/resume/stop in progress
  size_t creating_ = 0;
  double bucket_tokens_;
  std::chrono::steady_clock::time_point bucket_time_;
  boost::asio::steady_timer clock_;
  boost::asio::thread_pool flush_pool_{1};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deskbox::api
