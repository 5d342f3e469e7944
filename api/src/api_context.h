#pragma once
// What every role of the API shares: the collaborators a route class is constructed with, and
// the mapping of vmhost's and the store's errors to HTTP answers (done here, once).
#include <algorithm>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "api/clock.h"
#include "api/config.h"
#include "api/credentials.h"
#include "api/json_input.h"
#include "api/metrics.h"
#include "api/router.h"
#include "api/sandbox_registry.h"
#include "cdp_proxy/error.h"
#include "egress/error.h"
#include "recorder/log_event_sink.h"
#include "vmhost/sandbox_host.h"
#include "vnc_bridge/error.h"

namespace deskbox::api {

struct ApiContext {
  boost::asio::any_io_executor executor;
  vmhost::SandboxHost& manager;
  SandboxRegistry& sandboxes;
  Credentials& credentials;
  recorder::LogEventSink& events;
  Metrics& metrics;
  const DaemonConfig& config;
  const Clock& clock;
};

inline constexpr uint64_t kMaxFileBytes = uint64_t{1} << 30;  // upload / download size
inline constexpr size_t kMaxPathBytes = 4096;
// How long a call that reaches a page (CDP, screenshots, actions) waits for a sandbox restored
// for its create to reload its pages (vmhost WaitBrowserFresh): seconds under emulation, with
// room for a loaded host.
inline constexpr std::chrono::milliseconds kBrowserFreshTimeout{120000};

HttpResponse FromVmError(const vmhost::VmError& e);
// A write to the state database that failed and changed nothing: 507 insufficient_storage when
// its disk is full (retry once there is room), else 500 internal.
HttpResponse FromStoreError(const StoreError& e);
// vmhost's failure to reach a guest port or make a socket, as the component that asked tells
// failures apart: a timeout, the sandbox gone (kNotFound, kInvalidState), the guest refusing.
cdp_proxy::Error ToCdpError(vmhost::VmError e);
vnc_bridge::Error ToScreenError(vmhost::VmError e);
egress::Error ToEgressError(vmhost::VmError e);
// `file`: the call names a guest path, so the agent's NOT_FOUND / TOO_LARGE are about it.
HttpResponse FromAgentError(const vmhost::AgentError& e, bool file = false);
std::string Rfc3339(int64_t ms);

}  // namespace deskbox::api

namespace deskbox::api {

// The "display" member of a request body ("WxH" or {"width", "height"}); failures go to `in`.
// Absent or null: nullopt.
std::optional<std::pair<uint32_t, uint32_t>> ReadDisplayMember(ObjectReader& in);

// A live connection (viewer, CDP session) made with a scoped token ends when the token expires,
// as it does when the token is revoked: `close(token_id)` is called at the expiry unless the
// connection ended first (the timer Start returns was destroyed). Nothing happens for an API key.
class TokenExpiryWatch {
 public:
  TokenExpiryWatch(const Principal& p, const Clock& clock) {
    if (p.kind != Principal::Kind::kToken || p.expires_at_ms <= 0) return;
    token_id_ = p.id;
    ends_ = clock.Steady() +
            std::chrono::milliseconds(std::max<int64_t>(0, p.expires_at_ms - clock.NowMs()));
  }
  // Starts watching on `executor`; the returned timer must live as long as the connection.
  std::unique_ptr<boost::asio::steady_timer> Start(
      boost::asio::any_io_executor executor, std::function<void(const std::string&)> close) const {
    auto timer = std::make_unique<boost::asio::steady_timer>(executor);
    if (!ends_) return timer;
    timer->expires_at(*ends_);
    timer->async_wait([close = std::move(close), id = token_id_](boost::system::error_code ec) {
      if (!ec) close(id);
    });
    return timer;
  }

 private:
  std::string token_id_;
  std::optional<std::chrono::steady_clock::time_point> ends_;
};

}  // namespace deskbox::api
