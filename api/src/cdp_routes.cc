#include "cdp_routes.h"
#include "common/slot_network.h"

#include <fmt/format.h>

#include <boost/beast/core/string.hpp>

namespace deskbox::api {

namespace asio = boost::asio;
using boost::beast::http::verb;
using namespace std::chrono_literals;
using vmhost::SandboxState;

void CdpRoutes::Register(Router& router) {
  // Browsers and WebSocket clients open these by URL, so a token may come in the query; CDP
  // clients add a trailing slash.
  auto add = [&](verb m, const char* pattern, Handler h) {
    router.Add({.method = m,
                .pattern = pattern,
                .access = Access::Tokens({Scope::kCdp}).InQuery(),
                .handler = std::move(h),
                .trailing_slash = true});
  };
  auto h = [this](Reply (CdpRoutes::*f)(Call&)) {
    return [this, f](Call& c) { return (this->*f)(c); };
  };
  add(verb::get, "/v1/sandboxes/{id}/cdp", h(&CdpRoutes::CdpBrowser));
  add(verb::get, "/v1/sandboxes/{id}/cdp/json/version", h(&CdpRoutes::CdpVersion));
  add(verb::get, "/v1/sandboxes/{id}/cdp/json/list", h(&CdpRoutes::CdpList));
  add(verb::get, "/v1/sandboxes/{id}/cdp/json", h(&CdpRoutes::CdpList));
  add(verb::put, "/v1/sandboxes/{id}/cdp/json/new", h(&CdpRoutes::CdpNew));
  add(verb::get, "/v1/sandboxes/{id}/cdp/json/activate/{target}", h(&CdpRoutes::CdpActivate));
  add(verb::get, "/v1/sandboxes/{id}/cdp/json/close/{target}", h(&CdpRoutes::CdpClose));
  add(verb::get, "/v1/sandboxes/{id}/cdp/devtools/browser/{target}", h(&CdpRoutes::CdpBrowser));
  add(verb::get, "/v1/sandboxes/{id}/cdp/devtools/page/{target}", h(&CdpRoutes::CdpPage));
}

void CdpRoutes::OnSandboxState(const SandboxRecord& r, SandboxState) {
  if (r.state == SandboxState::kRunning) return;
  cdp_.CloseSandbox(r.id, fmt::format("sandbox {}", vmhost::ToString(r.state)));
}

asio::awaitable<std::expected<asio::ip::tcp::socket, cdp_proxy::Error>> CdpRoutes::DialCdpVersion(
    const std::string& sandbox_id) {
  auto sb = ctx_.manager.Find(sandbox_id);
  if (!sb || sb->state() != SandboxState::kRunning)
    co_return std::unexpected(
        cdp_proxy::Error{cdp_proxy::ErrorCode::kClosed, "the sandbox is not running"});
  auto s = co_await ctx_.manager.ConnectGuest(sb->slot(), slot_network::kGuestCdpPort, 5s);
  if (!s) co_return std::unexpected(ToCdpError(std::move(s.error())));
  co_return std::move(*s);
}

asio::awaitable<std::expected<asio::ip::tcp::socket, cdp_proxy::Error>> CdpRoutes::DialCdp(
    const std::string& sandbox_id) {
  // Pages are reached only once none holds random state shared with other clones (a sandbox
  // restored for its create reloads them right after; vmhost WaitBrowserFresh).
  if (auto sb = ctx_.manager.Find(sandbox_id)) {
    if (auto fresh = co_await ctx_.manager.WaitBrowserFresh(sb, kBrowserFreshTimeout); !fresh)
      co_return std::unexpected(ToCdpError(std::move(fresh.error())));
  }
  co_return co_await DialCdpVersion(sandbox_id);
}

cdp_proxy::PublicUrls CdpRoutes::Urls(const Call& c) const {
  // The host the client used to reach us (checked to be a plain host[:port]), else our address.
  std::string host(c.ex.header("Host"));
  bool ok = !host.empty() && host.size() <= 255 &&
            host.find_first_not_of(
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") ==
                std::string::npos;
  if (!ok) host = fmt::format("{}:{}", ctx_.config.listen_host, ctx_.config.listen_port);
  cdp_proxy::PublicUrls u;
  u.host_path = fmt::format("{}/v1/sandboxes/{}/cdp", host, c.id);
  u.ws_base = "ws://" + u.host_path;
  if (!c.query_token.empty()) u.query = "?token=" + c.query_token;
  return u;
}

std::expected<const SandboxRecord*, HttpResponse> CdpRoutes::RunningRecord(const std::string& id) {
  auto rec = ctx_.sandboxes.Get(id);
  if (!rec) return std::unexpected(rec.error());
  if ((*rec)->state != SandboxState::kRunning)
    return std::unexpected(Error(409, "invalid_state",
                                 fmt::format("sandbox {} is {}; its browser is not reachable", id,
                                             vmhost::ToString((*rec)->state))));
  return *rec;
}

asio::awaitable<std::expected<CdpRoutes::GuestAnswer, HttpResponse>> CdpRoutes::GuestJson(
    Call& c, verb m, const std::string& target) {
  if (auto rec = RunningRecord(c.id); !rec) co_return std::unexpected(rec.error());
  auto a = co_await cdp_.GuestHttp(c.id, m, target);
  if (!a)
    co_return std::unexpected(
        Error(502, "guest_error", "the sandbox's browser: " + a.error().message));
  co_return GuestAnswer{a->status, std::move(a->body)};
}

// The guest's answer to `target`, passed through `sanitize` (a cdp_proxy::Sanitize* function).
template <typename Sanitize>
asio::awaitable<std::expected<nlohmann::json, HttpResponse>> CdpRoutes::Sanitized(
    Call& c, verb m, const std::string& target, Sanitize sanitize) {
  using R = std::expected<nlohmann::json, HttpResponse>;
  auto a = co_await GuestJson(c, m, target);
  if (!a) co_return R(std::unexpected(a.error()));
  if (m == verb::put && a->status != 200)
    co_return R(std::unexpected(
        Error(502, "guest_error", fmt::format("the sandbox's browser answered {}", a->status))));
  auto v = sanitize(a->body, Urls(c));
  std::string what = target.substr(0, target.find('?'));
  if (!v)
    co_return R(std::unexpected(
        Error(502, "guest_error",
              fmt::format("the sandbox's browser gave a bad {}: {}", what, v.error().message))));
  if constexpr (requires { v->body; })
    co_return R(v->body);
  else
    co_return R(nlohmann::json(*v));
}

Reply CdpRoutes::CdpVersion(Call& c) {
  auto v = co_await Sanitized(c, verb::get, "/json/version", cdp_proxy::SanitizeVersion);
  if (!v) co_return v.error();
  co_return Json(200, *v);
}

Reply CdpRoutes::CdpList(Call& c) {
  auto v = co_await Sanitized(c, verb::get, "/json/list", cdp_proxy::SanitizeTargets);
  if (!v) co_return v.error();
  co_return Json(200, *v);
}

Reply CdpRoutes::CdpNew(Call& c) {
  std::string url = "about:blank";
  for (const auto& [k, v] : c.ex.query()) {
    if (k == "url")
      url = v;
    else if (k != "token")
      co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
  }
  if (url.size() > 8192 || url.find_first_of(std::string("\r\n\0", 3)) != std::string::npos)
    co_return Error(400, "invalid_request", "url must be at most 8192 bytes without CR, LF or NUL");
  // Chromium takes the URL as the raw query string; escape what would end it.
  std::string escaped;
  for (unsigned char ch : url) {
    if (ch <= 0x20 || ch >= 0x7f || ch == '#' || ch == '%')
      escaped += fmt::format("%{:02X}", ch);
    else
      escaped += static_cast<char>(ch);
  }
  auto v = co_await Sanitized(c, verb::put, "/json/new?" + escaped, cdp_proxy::SanitizeTarget);
  if (!v) co_return v.error();
  co_return Json(200, *v);
}

// /json/activate/{target} and /json/close/{target}: the guest answers in plain text.
Reply CdpRoutes::CdpTargetAction(Call& c, std::string action, std::string answer) {
  if (!cdp_proxy::IsValidTargetId(c.target)) co_return Error(404, "not_found", "no such target");
  auto a = co_await GuestJson(c, verb::get, "/json/" + action + "/" + c.target);
  if (!a) co_return a.error();
  if (a->status == 404) co_return Error(404, "not_found", fmt::format("no target {}", c.target));
  if (a->status != 200)
    co_return Error(502, "guest_error",
                    fmt::format("the sandbox's browser answered {}", a->status));
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(answer);
  co_return r;
}

Reply CdpRoutes::CdpActivate(Call& c) {
  co_return co_await CdpTargetAction(c, "activate", "Target activated");
}

Reply CdpRoutes::CdpClose(Call& c) {
  co_return co_await CdpTargetAction(c, "close", "Target is closing");
}

HttpResponse CdpRoutes::WebSocket(Call& c, std::string guest_path) {
  HttpResponse r;
  r.status = 101;
  std::string id = c.id, request_id = c.request_id;
  recorder::v1::Actor actor = c.Actor();
  TokenExpiryWatch expiry(c.principal, ctx_.clock);
  r.upgrade = [this, id, guest_path, actor, request_id, expiry](
                  boost::beast::tcp_stream stream,
                  boost::beast::http::request<boost::beast::http::buffer_body> req)
      -> asio::awaitable<void> {
    auto watch = expiry.Start(stream.get_executor(), [this](const std::string& token) {
      cdp_.CloseActor(token, "the token expired");
    });
    co_await cdp_.Run(std::move(stream), std::move(req), id, guest_path, actor, request_id);
  };
  return r;
}

Reply CdpRoutes::CdpBrowser(Call& c) {
  if (auto rec = ctx_.sandboxes.Get(c.id); !rec) co_return rec.error();
  bool upgrade = boost::beast::iequals(c.ex.header("Upgrade"), "websocket");
  if (!upgrade) {
    // Plain GET of the endpoint: what /json/version says (so the URL itself is informative).
    if (!c.target.empty()) co_return Error(400, "invalid_request", "this is a WebSocket endpoint");
    co_return co_await CdpVersion(c);
  }
  if (auto rec = RunningRecord(c.id); !rec) co_return rec.error();
  std::string browser = c.target;
  if (browser.empty()) {
    auto a = co_await GuestJson(c, verb::get, "/json/version");
    if (!a) co_return a.error();
    auto v = cdp_proxy::SanitizeVersion(a->body, Urls(c));
    if (!v)
      co_return Error(502, "guest_error",
                      "the sandbox's browser gave a bad /json/version: " + v.error().message);
    browser = v->browser_id;
  } else if (!cdp_proxy::IsValidBrowserId(browser)) {
    co_return Error(404, "not_found", "no such browser endpoint");
  }
  co_return WebSocket(c, "/devtools/browser/" + browser);
}

Reply CdpRoutes::CdpPage(Call& c) {
  if (auto rec = ctx_.sandboxes.Get(c.id); !rec) co_return rec.error();
  if (!boost::beast::iequals(c.ex.header("Upgrade"), "websocket"))
    co_return Error(400, "invalid_request", "this is a WebSocket endpoint");
  if (!cdp_proxy::IsValidTargetId(c.target)) co_return Error(404, "not_found", "no such target");
  if (auto rec = RunningRecord(c.id); !rec) co_return rec.error();
  co_return WebSocket(c, "/devtools/page/" + c.target);
}

}  // namespace deskbox::api
