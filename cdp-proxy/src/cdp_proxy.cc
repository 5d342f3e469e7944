#include "cdp_proxy/cdp_proxy.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>

#include "cdp_proxy/guest_json.h"
#include "common/http_reject.h"
#include "common/log.h"
#include "common/slot_network.h"

namespace deskbox::cdp_proxy {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using namespace std::chrono_literals;
constexpr char kLog[] = "cdp";

using Ws = websocket::stream<beast::tcp_stream>;

struct CdpProxy::Session {
  Session(Ws client_ws, Ws guest_ws, asio::any_io_executor ex)
      : client(std::move(client_ws)), guest(std::move(guest_ws)), done(ex) {}
  Ws client;
  Ws guest;
  std::string sandbox_id;
  recorder::v1::Actor actor;
  std::string close_reason;  // set by CloseSandbox
  bool client_done = false;  // the client side can no longer be read
  bool guest_done = false;   // the guest side can no longer be read
  asio::steady_timer done;
};

CdpProxy::CdpProxy(asio::any_io_executor executor, GuestDialer& dialer, recorder::EventSink& events,
                   CdpProxyOptions options)
    : executor_(executor), dialer_(dialer), events_(events), options_(options) {}

CdpProxy::~CdpProxy() { *alive_ = false; }

size_t CdpProxy::Sessions(const std::string& sandbox_id) const {
  auto it = sessions_.find(sandbox_id);
  return it == sessions_.end() ? 0 : it->second.size();
}

size_t CdpProxy::TotalSessions() const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s.size();
  return n;
}

bool CdpProxy::AtSessionLimit(const std::string& sandbox_id) const {
  return Sessions(sandbox_id) >= options_.max_sessions_per_sandbox;
}

void CdpProxy::Count(const std::string& method) {
  auto it = method_counts_.find(method);
  if (it != method_counts_.end()) ++it->second;
  else if (method_counts_.size() < options_.max_counted_methods) method_counts_[method] = 1;
  else ++method_counts_["other"];
}

namespace {

// What kind of failure DevToolsHttp's is, to GuestHttp's callers.
ErrorCode CodeOf(vmhost::DevToolsHttpError::Code code) {
  using C = vmhost::DevToolsHttpError::Code;
  switch (code) {
    case C::kInvalidTarget:
      return ErrorCode::kBadTarget;
    case C::kSend:
      return ErrorCode::kIo;
    case C::kReceive:
      return ErrorCode::kClosed;
    case C::kTimeout:
      return ErrorCode::kTimeout;
    case C::kHeaderTooLarge:
    case C::kBodyTooLarge:
    case C::kMalformed:
      return ErrorCode::kGuest;
  }
  return ErrorCode::kGuest;
}

}  // namespace

asio::awaitable<std::expected<GuestHttpAnswer, Error>> CdpProxy::GuestHttp(
    const std::string& sandbox_id, http::verb method, const std::string& target) {
  std::expected<asio::ip::tcp::socket, Error> sock = std::unexpected(Error{ErrorCode::kIo, ""});
  if (method == http::verb::get && target == "/json/version")
    sock = co_await dialer_.DialCdpVersion(sandbox_id);
  else
    sock = co_await dialer_.DialCdp(sandbox_id);
  if (!sock) co_return std::unexpected(std::move(sock.error()));
  auto answer = co_await vmhost::DevToolsHttp(
      std::move(*sock), method, target,
      {.body_bytes = kMaxGuestJson, .timeout = options_.guest_timeout});
  if (!answer)
    co_return std::unexpected(
        Error{CodeOf(answer.error().code), "the guest's DevTools: " + answer.error().message});
  co_return std::move(*answer);
}

asio::awaitable<void> CdpProxy::Run(beast::tcp_stream stream, http::request<http::buffer_body> request,
                                    std::string sandbox_id, std::string guest_path, recorder::v1::Actor actor,
                                    std::string request_id) {
  auto http_error = [&](unsigned status, std::string code, std::string message) -> asio::awaitable<void> {
    return RejectUpgrade(stream, request.version(), status, code, message, request_id);
  };
  if (AtSessionLimit(sandbox_id)) {
    co_await http_error(429, "rate_limited",
                        fmt::format("this sandbox has {} CDP sessions, the limit", options_.max_sessions_per_sandbox));
    co_return;
  }
  auto sock = co_await dialer_.DialCdp(sandbox_id);
  if (!sock) {
    co_await http_error(502, "guest_error",
                        "cannot reach the sandbox's browser: " + sock.error().message);
    co_return;
  }
  Ws guest(beast::tcp_stream(std::move(*sock)));
  beast::get_lowest_layer(guest).expires_never();
  guest.read_message_max(options_.max_message_bytes);
  websocket::stream_base::timeout guest_timeouts{options_.guest_timeout, websocket::stream_base::none(), false};
  guest.set_option(guest_timeouts);
  boost::system::error_code ec;
  websocket::response_type guest_answer;
  co_await guest.async_handshake(guest_answer, slot_network::GuestCdpHostPort(), guest_path,
                                 asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    bool missing = guest_answer.result() == http::status::not_found || guest_answer.result() == http::status::bad_request;
    // Built before the co_await: GCC 12 destroyed a conditional's string temporaries twice
    // inside a co_await expression (a guest that refused the handshake crashed deskboxd).
    std::string message =
        missing ? "the browser has no such target" : "the browser refused the connection: " + ec.message();
    std::string code = missing ? "not_found" : "guest_error";
    co_await http_error(missing ? 404 : 502, std::move(code), std::move(message));
    co_return;
  }
  // The guest side may stay silent for as long as the client wants.
  guest.set_option(websocket::stream_base::timeout{options_.guest_timeout, websocket::stream_base::none(), false});
  // The HTTP server's read deadline is still armed on this stream: the WebSocket keeps its own
  // timeouts (handshake, idle pings), so the stream's must go.
  stream.expires_never();
  Ws client(std::move(stream));
  client.read_message_max(options_.max_message_bytes);
  client.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  client.set_option(websocket::stream_base::decorator([request_id](websocket::response_type& r) {
    r.set(http::field::server, "deskbox");
    r.set("X-Request-Id", request_id);
    r.set(http::field::cache_control, "no-store");
  }));
  co_await client.async_accept(request, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    boost::system::error_code ignored;
    beast::get_lowest_layer(guest).socket().close(ignored);
    co_return;
  }
  auto s = std::make_shared<Session>(std::move(client), std::move(guest), executor_);
  s->sandbox_id = sandbox_id;
  s->actor = actor;
  sessions_[sandbox_id].insert(s.get());
  log::Info(kLog, "sandbox {}: CDP session opened to {} ({} open)", sandbox_id, guest_path, Sessions(sandbox_id));
  asio::co_spawn(executor_, ClientToGuest(s), asio::detached);
  co_await GuestToClient(s);
  while (!s->client_done) {
    s->done.expires_after(1s);
    co_await s->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  beast::get_lowest_layer(s->client).socket().close(ec);
  beast::get_lowest_layer(s->guest).socket().close(ec);
  auto it = sessions_.find(sandbox_id);
  if (it != sessions_.end()) {
    it->second.erase(s.get());
    if (it->second.empty()) sessions_.erase(it);
  }
  log::Info(kLog, "sandbox {}: CDP session closed{}", sandbox_id,
            s->close_reason.empty() ? "" : " (" + s->close_reason + ")");
}

asio::awaitable<void> CdpProxy::ClientToGuest(std::shared_ptr<Session> s) {
  beast::flat_buffer buf;
  auto alive = alive_;
  bool guest_ok = true;
  for (;;) {
    boost::system::error_code ec;
    co_await s->client.async_read(buf, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !*alive) break;
    bool text = s->client.got_text();
    if (text) {
      std::string_view msg(static_cast<const char*>(buf.data().data()), buf.size());
      CdpMessageInfo info = InspectClientMessage(msg);
      Count(info.method);
      recorder::v1::Event e;
      e.set_sandbox_id(s->sandbox_id);
      *e.mutable_actor() = s->actor;
      auto* c = e.mutable_cdp();
      c->set_method(info.method);
      c->set_session_id(info.session_id);
      c->set_notable(info.notable);
      c->set_note(info.note);
      events_.Emit(std::move(e));
      if (info.notable) log::Info(kLog, "sandbox {}: notable CDP call {}: {}", s->sandbox_id, info.method, info.note);
    }
    // Once the guest side is gone, keep reading only to see the client's close.
    if (guest_ok && !s->guest_done) {
      s->guest.text(text);
      co_await s->guest.async_write(buf.data(), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) guest_ok = false;
    }
    buf.consume(buf.size());
  }
  s->client_done = true;
  if (*alive && !s->guest_done) {
    boost::system::error_code ec;
    beast::get_lowest_layer(s->guest).socket().close(ec);  // ends GuestToClient
  }
  if (*alive) s->done.cancel();
}

asio::awaitable<void> CdpProxy::GuestToClient(std::shared_ptr<Session> s) {
  beast::flat_buffer buf;
  boost::system::error_code ec;
  for (;;) {
    co_await s->guest.async_read(buf, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) break;
    s->client.text(s->guest.got_text());
    boost::system::error_code wec;
    co_await s->client.async_write(buf.data(), asio::redirect_error(asio::use_awaitable, wec));
    buf.consume(buf.size());
    if (wec) break;
  }
  s->guest_done = true;
  if (s->client_done) co_return;
  websocket::close_reason reason;
  if (!s->close_reason.empty()) {
    reason = {websocket::close_code::going_away, s->close_reason};
  } else if (ec == websocket::error::closed) {
    reason = s->guest.reason();  // the browser closed the target's connection: pass its close on
    if (reason.code == websocket::close_code::none) reason.code = websocket::close_code::normal;
  } else {
    reason = {websocket::close_code::internal_error, "lost the connection to the sandbox's browser"};
  }
  if (reason.reason.size() > 120) reason.reason.resize(120);
  boost::system::error_code cec;
  co_await s->client.async_close(reason, asio::redirect_error(asio::use_awaitable, cec));
}

void CdpProxy::CloseSandbox(const std::string& sandbox_id, const std::string& reason) {
  auto it = sessions_.find(sandbox_id);
  if (it == sessions_.end()) return;
  for (Session* s : it->second) End(*s, reason);
}

void CdpProxy::CloseActor(const std::string& actor_id, const std::string& reason) {
  for (auto& [id, sessions] : sessions_)
    for (Session* s : sessions)
      if (s->actor.id() == actor_id) End(*s, reason);
}

void CdpProxy::End(Session& s, const std::string& reason) {
  if (s.close_reason.empty()) s.close_reason = reason;
  boost::system::error_code ec;
  beast::get_lowest_layer(s.guest).socket().close(ec);  // GuestToClient ends and closes the client
}

}  // namespace deskbox::cdp_proxy
