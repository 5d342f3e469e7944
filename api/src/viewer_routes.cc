#include "viewer_routes.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/log.h"
#include "common/slot_network.h"

namespace deskbox::api {

namespace asio = boost::asio;
using boost::beast::http::verb;
using namespace std::chrono_literals;

namespace {

constexpr size_t kMaxAssetBytes = 2 << 20;

// noVNC module paths the page may load: core/… and vendor/… JavaScript, plain names only.
bool IsAssetPath(std::string_view path) {
  if (!path.starts_with("core/") && !path.starts_with("vendor/")) return false;
  if (!path.ends_with(".js") || path.size() > 200) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    auto seg = path.substr(start, end - start);
    if (seg.empty() || seg.front() == '.') return false;
    for (char ch : seg)
      if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '.' && ch != '_' && ch != '-')
        return false;
    start = end + 1;
  }
  return true;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

// The page: noVNC scaled to the window, a bar with the connection state, reconnects with backoff.
// `window.deskboxViewer` is the RFB object (for scripts and tests).
constexpr char kViewPage[] = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>deskbox · {id}</title>
<style>
  html, body {{ margin: 0; height: 100%; background: #1e1e1e; color: #ddd; font: 13px system-ui, sans-serif; overflow: hidden; }}
  #bar {{ height: 28px; display: flex; align-items: center; gap: 14px; padding: 0 10px; background: #111; }}
  #state::before {{ content: "●"; margin-right: 6px; color: #c90; }}
  #state[data-state="connected"]::before {{ color: #3c3; }}
  #state[data-state="disconnected"]::before {{ color: #c33; }}
  #screen {{ position: absolute; top: 28px; left: 0; right: 0; bottom: 0; }}
  .dim {{ color: #888; }}
</style></head>
<body>
<div id="bar"><span id="state" data-state="connecting">connecting…</span><span class="dim">{id}</span><span id="mode">{mode}</span></div>
<div id="screen"></div>
<script type="module" nonce="{nonce}">
import RFB from "./view/novnc/core/rfb.js";
const control = {control};
// The WebSocket authenticates with the cookie this page came with.
const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host +
  location.pathname.replace(/\/view$/, "/vnc");
const state = document.getElementById("state");
let delay = 1000;
function show(s, text) {{ state.dataset.state = s; state.textContent = text; }}
function connect() {{
  show("connecting", "connecting…");
  const rfb = new RFB(document.getElementById("screen"), url, {{ shared: true }});
  rfb.scaleViewport = true;
  rfb.resizeSession = false;
  rfb.viewOnly = !control;
  rfb.focusOnClick = control;
  rfb.addEventListener("connect", () => {{ delay = 1000; show("connected", "live"); }});
  rfb.addEventListener("disconnect", () => {{
    show("disconnected", "disconnected; reconnecting in " + Math.round(delay / 1000) + " s");
    setTimeout(connect, delay);
    delay = Math.min(delay * 2, 10000);
  }});
  window.deskboxViewer = rfb;
}}
connect();
</script>
</body></html>
)HTML";

}  // namespace

ViewerRoutes::ViewerRoutes(ApiContext& ctx)
    : ctx_(ctx),
      viewers_(std::make_unique<vnc_bridge::ViewerBridge>(
          ctx.executor, [this](const std::string& id) { return DialRfb(id); }, ctx.events)) {}

void ViewerRoutes::Register(Router& router) {
  using S = Scope;
  // Browsers open these by URL, so the token comes in the query; the page's WebSocket and
  // modules use the cookie the page sets.
  router.Add({.method = verb::get,
              .pattern = "/v1/sandboxes/{id}/vnc",
              .access = Access::Tokens({S::kView, S::kControl}).InQuery().InCookie(),
              .handler = [this](Call& c) { return ViewerSocket(c); }});
  router.Add({.method = verb::get,
              .pattern = "/v1/sandboxes/{id}/view",
              .access = Access::Tokens({S::kView, S::kControl}).InQuery(),
              .handler = [this](Call& c) { return ViewerPage(c); }});
  router.Add({.method = verb::get,
              .pattern = "/v1/sandboxes/{id}/view/novnc/{path}",
              .access = Access::Tokens({S::kView, S::kControl}).InCookie(),
              .handler = [this](Call& c) { return ViewerAsset(c); }});
}

void ViewerRoutes::OnSandboxState(const SandboxRecord& r, vmhost::SandboxState) {
  if (r.state == vmhost::SandboxState::kRunning) return;
  viewers_->CloseSandbox(r.id, fmt::format("sandbox {}", vmhost::ToString(r.state)));
}

Reply ViewerRoutes::ViewerSocket(Call& c) {
  auto rec = ctx_.sandboxes.Get(c.id);
  if (!rec) co_return rec.error();
  if (!boost::beast::iequals(c.ex.header("Upgrade"), "websocket"))
    co_return Error(400, "invalid_request",
                    "this is a WebSocket endpoint (RFB over WebSocket, for noVNC)");
  if ((*rec)->state != vmhost::SandboxState::kRunning)
    co_return Error(409, "invalid_state",
                    fmt::format("sandbox {} is {}; its screen is not reachable", c.id,
                                vmhost::ToString((*rec)->state)));
  bool may_control =
      c.principal.kind == Principal::Kind::kApiKey || c.principal.scope == Scope::kControl;
  recorder::v1::Actor actor = c.Actor();
  actor.set_kind(recorder::v1::Actor::HUMAN);
  HttpResponse r;
  r.status = 101;
  std::string id = c.id, request_id = c.request_id;
  TokenExpiryWatch expiry(c.principal, ctx_.clock);
  r.upgrade = [this, id, actor, may_control, request_id, expiry](
                  boost::beast::tcp_stream stream,
                  boost::beast::http::request<boost::beast::http::buffer_body> req)
      -> asio::awaitable<void> {
    auto watch = expiry.Start(stream.get_executor(), [this](const std::string& token) {
      viewers_->CloseActor(token, "the token expired");
    });
    co_await viewers_->Run(std::move(stream), std::move(req), id, actor, may_control, request_id);
  };
  co_return r;
}

asio::awaitable<std::expected<asio::ip::tcp::socket, vnc_bridge::Error>> ViewerRoutes::DialRfb(
    const std::string& id) {
  auto sb = ctx_.manager.Find(id);
  if (!sb || sb->state() != vmhost::SandboxState::kRunning)
    co_return std::unexpected(
        vnc_bridge::Error{vnc_bridge::ErrorCode::kClosed, "the sandbox is not running"});
  auto s = co_await ctx_.manager.ConnectGuest(sb->slot(), slot_network::kGuestRfbPort, 5s);
  if (!s) co_return std::unexpected(ToScreenError(std::move(s.error())));
  co_return std::move(*s);
}

Reply ViewerRoutes::ViewerPage(Call& c) {
  auto rec = ctx_.sandboxes.Get(c.id);
  if (!rec) co_return rec.error();
  bool control =
      c.principal.kind == Principal::Kind::kApiKey || c.principal.scope == Scope::kControl;
  // The credential that opened the page (?token= or the header) authenticates its modules and
  // its WebSocket as a cookie.
  std::string nonce = NewId("n");
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = fmt::format(kViewPage, fmt::arg("id", HtmlEscape(c.id)), fmt::arg("nonce", nonce),
                       fmt::arg("control", control ? "true" : "false"),
                       fmt::arg("mode", control ? "control" : "view only"));
  r.headers.emplace_back(
      "Content-Security-Policy",
      fmt::format("default-src 'none'; script-src 'self' 'nonce-{}'; connect-src 'self'; "
                  "img-src 'self' data: blob:; style-src 'unsafe-inline'; base-uri 'none'; "
                  "frame-ancestors 'none'; form-action 'none'",
                  nonce));
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  // Scoped to this sandbox's routes (only /vnc and the modules accept it), not readable by
  // script, never sent by another site's page (so no cross-site WebSocket can use it).
  r.headers.emplace_back("Set-Cookie",
                         fmt::format("{}={}; Path=/v1/sandboxes/{}/; HttpOnly; SameSite=Strict",
                                     kViewCookie, c.secret, c.id));
  co_return r;
}

Reply ViewerRoutes::ViewerAsset(Call& c) {
  if (!ctx_.sandboxes.Find(c.id)) co_return Error(404, "not_found", fmt::format("no sandbox {}", c.id));
  if (!IsAssetPath(c.target)) co_return Error(404, "not_found", "no such file");
  std::filesystem::path file = std::filesystem::path(ctx_.config.novnc_dir) / c.target;
  std::error_code ec;
  auto status = std::filesystem::status(file, ec);
  if (ec || !std::filesystem::is_regular_file(status)) {
    if (!std::filesystem::exists(std::filesystem::path(ctx_.config.novnc_dir) / "core" / "rfb.js"))
      co_return Error(
          500, "internal",
          fmt::format("noVNC is not installed in {} (Debian package novnc, or --novnc-dir)",
                      ctx_.config.novnc_dir));
    co_return Error(404, "not_found", "no such file");
  }
  auto size = std::filesystem::file_size(file, ec);
  if (ec || size > kMaxAssetBytes) co_return Error(404, "not_found", "no such file");
  std::ifstream in(file, std::ios::binary);
  std::ostringstream body;
  body << in.rdbuf();
  if (!in && !in.eof()) co_return Error(500, "internal", "cannot read " + c.target);
  HttpResponse r;
  r.content_type = "text/javascript; charset=utf-8";
  r.body = std::move(body).str();
  co_return r;
}

}  // namespace deskbox::api
