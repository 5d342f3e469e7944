#pragma once
// CdpRoutes: CDP for Playwright / Puppeteer (cdp-proxy) — /json/* answered from the guest's
// browser with URLs rewritten to ours, and its DevTools WebSockets proxied. Sessions end when
// the sandbox leaves the running state or their token is revoked or expires.
#include "api_context.h"
#include "cdp_proxy/cdp_proxy.h"
#include "cdp_proxy/guest_json.h"

namespace deskbox::api {

class CdpRoutes final : public SandboxStateListener, private cdp_proxy::GuestDialer {
 public:
  explicit CdpRoutes(ApiContext& ctx) : ctx_(ctx), cdp_(ctx.executor, *this, ctx.events) {}
  void Register(Router& router);
  cdp_proxy::CdpProxy& proxy() { return cdp_; }

  void OnSandboxState(const SandboxRecord& r, vmhost::SandboxState from) override;

 private:
  struct GuestAnswer {
    unsigned status = 0;
    std::string body;
  };
  Reply CdpVersion(Call& c);
  Reply CdpList(Call& c);
  Reply CdpNew(Call& c);
  Reply CdpActivate(Call& c);
  Reply CdpClose(Call& c);
  Reply CdpTargetAction(Call& c, std::string action, std::string answer);
  Reply CdpBrowser(Call& c);
  Reply CdpPage(Call& c);
  boost::asio::awaitable<std::expected<GuestAnswer, HttpResponse>> GuestJson(
      Call& c, boost::beast::http::verb m, const std::string& target);
  template <typename Sanitize>
  boost::asio::awaitable<std::expected<nlohmann::json, HttpResponse>> Sanitized(
      Call& c, boost::beast::http::verb m, const std::string& target, Sanitize sanitize);
  cdp_proxy::PublicUrls Urls(const Call& c) const;
  HttpResponse WebSocket(Call& c, std::string guest_path);
  // The running sandbox's record, or the answer (404, 409) when it is not.
  std::expected<const SandboxRecord*, HttpResponse> RunningRecord(const std::string& id);
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, cdp_proxy::Error>> DialCdp(
      const std::string& sandbox_id) override;
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, cdp_proxy::Error>>
  DialCdpVersion(const std::string& sandbox_id) override;

  ApiContext& ctx_;
  cdp_proxy::CdpProxy cdp_;
};

}  // namespace deskbox::api
