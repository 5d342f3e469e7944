#include "vnc_bridge/viewer_bridge.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/beast/websocket.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <vector>

#include "common/http_reject.h"
#include "common/log.h"
#include "vnc_bridge/client_filter.h"

namespace deskbox::vnc_bridge {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using namespace std::chrono_literals;
constexpr char kViewerLog[] = "viewer";

using Ws = websocket::stream<beast::tcp_stream>;

struct ViewerBridge::Session {
  Session(Ws viewer_ws, asio::ip::tcp::socket guest_socket, bool may_control, asio::any_io_executor ex)
      : viewer(std::move(viewer_ws)), guest(std::move(guest_socket)), filter(may_control), done(ex) {}
  Ws viewer;
  asio::ip::tcp::socket guest;
  ClientFilter filter;
  std::string sandbox_id;
  recorder::v1::Actor actor;
  std::string request_id;
  std::string close_reason;    // set by CloseSandbox, or why the bridge ended it
  bool viewer_done = false;    // the viewer side can no longer be read
  bool guest_done = false;     // the guest side can no longer be read
  ClientFilter::Counts pending;  // input not yet reported
  std::string greeting;          // what the guest sent before the viewer was accepted
  std::chrono::steady_clock::time_point last_report{};
  asio::steady_timer done;
};

ViewerBridge::ViewerBridge(asio::any_io_executor executor, Dialer dialer, recorder::EventSink& events,
                           ViewerBridgeOptions options)
    : executor_(executor), dialer_(std::move(dialer)), events_(events), options_(options) {}

ViewerBridge::~ViewerBridge() { *alive_ = false; }

size_t ViewerBridge::Viewers(const std::string& sandbox_id) const {
  auto it = sessions_.find(sandbox_id);
  return it == sessions_.end() ? 0 : it->second.size();
}

size_t ViewerBridge::TotalViewers() const {
  size_t n = 0;
  for (const auto& [id, s] : sessions_) n += s.size();
  return n;
}

void ViewerBridge::Report(Session& s, bool final) {
  auto now = std::chrono::steady_clock::now();
  if (!final && now - s.last_report < options_.input_report_interval) return;
  if (!s.pending.any()) return;
  s.last_report = now;
  bool dropped = !s.filter.may_control();
  for (auto [kind, count] : {std::pair{"pointer", s.pending.pointer}, std::pair{"key", s.pending.key},
                             std::pair{"clipboard", s.pending.clipboard}}) {
    if (count == 0) continue;
    recorder::v1::Event e;
    e.set_sandbox_id(s.sandbox_id);
    e.set_request_id(s.request_id);
    *e.mutable_actor() = s.actor;
    auto* v = e.mutable_viewer_input();
    v->set_kind(kind);
    v->set_dropped(dropped);
    v->set_count(count);
    events_.Emit(std::move(e));
  }
  s.pending = {};
}

asio::awaitable<void> ViewerBridge::Run(beast::tcp_stream stream, http::request<http::buffer_body> request,
                                        std::string sandbox_id, recorder::v1::Actor actor, bool may_control,
                                        std::string request_id) {
  auto http_error = [&](unsigned status, std::string code, std::string message) -> asio::awaitable<void> {
    return RejectUpgrade(stream, request.version(), status, code, message, request_id);
  };
  if (Viewers(sandbox_id) >= options_.max_viewers_per_sandbox) {
    co_await http_error(429, "rate_limited",
                        fmt::format("this sandbox has {} viewers, the limit", options_.max_viewers_per_sandbox));
    co_return;
  }
  auto guest = co_await DialGreeted(sandbox_id);
  if (!guest) {
    co_await http_error(502, "guest_error",
                        "cannot reach the sandbox's screen: " + guest.error().message);
    co_return;
  }
  // noVNC may ask for the "binary" subprotocol (older versions always did): agree to it.
  bool binary_protocol = false;
  for (auto part : beast::http::token_list(request[http::field::sec_websocket_protocol]))
    binary_protocol = binary_protocol || beast::iequals(part, "binary");
  stream.expires_never();
  Ws viewer(std::move(stream));
  viewer.binary(true);
  viewer.read_message_max(kMaxViewerCutText + 4096);
  viewer.set_option(websocket::stream_base::timeout::suggested(beast::role_type::server));
  viewer.set_option(websocket::stream_base::decorator([request_id, binary_protocol](websocket::response_type& r) {
    r.set(http::field::server, "deskbox");
    r.set("X-Request-Id", request_id);
    r.set(http::field::cache_control, "no-store");
    if (binary_protocol) r.set(http::field::sec_websocket_protocol, "binary");
  }));
  boost::system::error_code ec;
  co_await viewer.async_accept(request, asio::redirect_error(asio::use_awaitable, ec));
  if (ec) {
    guest->socket.close(ec);
    co_return;
  }
  auto s = std::make_shared<Session>(std::move(viewer), std::move(guest->socket), may_control, executor_);
  s->greeting = std::move(guest->greeting);
  s->sandbox_id = sandbox_id;
  s->actor = actor;
  s->request_id = request_id;
  sessions_[sandbox_id].insert(s.get());
  log::Info(kViewerLog, "sandbox {}: viewer {} connected ({}; {} viewing)", sandbox_id, actor.id(),
            may_control ? "may control" : "view only", Viewers(sandbox_id));
  asio::co_spawn(executor_, ViewerToGuest(s), asio::detached);
  co_await GuestToViewer(s);
  while (!s->viewer_done) {
    s->done.expires_after(1s);
    co_await s->done.async_wait(asio::redirect_error(asio::use_awaitable, ec));
  }
  Report(*s, true);
  beast::get_lowest_layer(s->viewer).socket().close(ec);
  s->guest.close(ec);
  auto it = sessions_.find(sandbox_id);
  if (it != sessions_.end()) {
    it->second.erase(s.get());
    if (it->second.empty()) sessions_.erase(it);
  }
  log::Info(kViewerLog, "sandbox {}: viewer {} disconnected{}", sandbox_id, actor.id(),
            s->close_reason.empty() ? "" : " (" + s->close_reason + ")");
}

asio::awaitable<void> ViewerBridge::ViewerToGuest(std::shared_ptr<Session> s) {
  beast::flat_buffer buf;
  auto alive = alive_;
  std::string out;
  bool guest_ok = true;
  for (;;) {
    boost::system::error_code ec;
    co_await s->viewer.async_read(buf, asio::redirect_error(asio::use_awaitable, ec));
    if (ec || !*alive) break;
    out.clear();
    auto fed = s->filter.Feed({static_cast<const uint8_t*>(buf.data().data()), buf.size()}, out);
    buf.consume(buf.size());
    auto counts = s->filter.TakeCounts();
    s->pending.pointer += counts.pointer;
    s->pending.key += counts.key;
    s->pending.clipboard += counts.clipboard;
    Report(*s, false);
    if (!fed) {
      log::Warn(kViewerLog, "sandbox {}: viewer {} refused: {}", s->sandbox_id, s->actor.id(),
                fed.error().message);
      if (s->close_reason.empty()) s->close_reason = fed.error().message;
      boost::system::error_code cec;
      s->guest.close(cec);  // GuestToViewer ends and closes the viewer with the reason
      guest_ok = false;
      continue;  // read on until the viewer's close
    }
    if (guest_ok && !s->guest_done && !out.empty()) {
      co_await asio::async_write(s->guest, asio::buffer(out), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) guest_ok = false;
    }
  }
  s->viewer_done = true;
  if (*alive && !s->guest_done) {
    boost::system::error_code ec;
    s->guest.close(ec);  // ends GuestToViewer
  }
  if (*alive) s->done.cancel();
}

asio::awaitable<void> ViewerBridge::GuestToViewer(std::shared_ptr<Session> s) {
  std::vector<uint8_t> buf(options_.read_chunk);
  boost::system::error_code ec;
  asio::steady_timer write_deadline(executor_);
  bool slow = false;
  for (bool first = true;; first = false) {
    size_t n = 0;
    if (first && !s->greeting.empty()) {
      n = std::min(buf.size(), s->greeting.size());
      std::memcpy(buf.data(), s->greeting.data(), n);
    } else {
      n = co_await s->guest.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
    }
    // A viewer that does not take a message within write_timeout is dropped.
    write_deadline.expires_after(options_.write_timeout);
    write_deadline.async_wait([s, &slow](boost::system::error_code tec) {
      if (tec) return;
      slow = true;
      boost::system::error_code cec;
      beast::get_lowest_layer(s->viewer).socket().close(cec);
    });
    boost::system::error_code wec;
    co_await s->viewer.async_write(asio::buffer(buf.data(), n), asio::redirect_error(asio::use_awaitable, wec));
    write_deadline.cancel();
    if (wec) break;
  }
  s->guest_done = true;
  if (slow && s->close_reason.empty()) s->close_reason = "the viewer did not keep up";
  if (s->viewer_done || slow) co_return;
  websocket::close_reason reason;
  if (!s->close_reason.empty()) {
    reason = {websocket::close_code::going_away, s->close_reason};
  } else {
    reason = {websocket::close_code::internal_error, "lost the connection to the sandbox's screen"};
  }
  if (reason.reason.size() > 120) reason.reason.resize(120);
  boost::system::error_code cec;
  co_await s->viewer.async_close(reason, asio::redirect_error(asio::use_awaitable, cec));
}

asio::awaitable<std::expected<ViewerBridge::Greeted, Error>> ViewerBridge::DialGreeted(
    const std::string& sandbox_id) {
  // Xvnc listens with a backlog of 5 and, emulated, accepts slowly: a burst of connections
  // overflows its accept queue, and a connection the kernel completed on our side but never
  // queued on the guest's gets no greeting, ever. So at most kMaxDialsInFlight connections per
  // sandbox wait for their greeting at once, and one that gets none in time is made again.
  constexpr size_t kMaxDialsInFlight = 3;
  constexpr int kAttempts = 3;
  auto alive = alive_;
  asio::steady_timer timer(executor_);
  auto deadline = std::chrono::steady_clock::now() + options_.write_timeout;
  while (dials_[sandbox_id] >= kMaxDialsInFlight) {
    // The bound on dials in flight did not free a place in time.
    if (std::chrono::steady_clock::now() > deadline)
      co_return std::unexpected(Error{ErrorCode::kTooLarge, "too many viewers connecting"});
    timer.expires_after(20ms);
    boost::system::error_code ec;
    co_await timer.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*alive) co_return std::unexpected(Error{ErrorCode::kClosed, "deskboxd is stopping"});
  }
  ++dials_[sandbox_id];
  struct Release {
    std::map<std::string, size_t>& dials;
    std::string id;
    std::shared_ptr<bool> alive;
    ~Release() {
      if (!*alive) return;
      if (--dials[id] == 0) dials.erase(id);
    }
  } release{dials_, sandbox_id, alive};
  Error last{ErrorCode::kTimeout, ""};
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    auto sock = co_await dialer_(sandbox_id);
    if (!sock) co_return std::unexpected(std::move(sock.error()));
    // The greeting ("RFB 003.008\n") within the greeting timeout.
    std::string greeting(12, '\0');
    bool expired = false;
    timer.expires_after(options_.greeting_timeout);
    timer.async_wait([&](boost::system::error_code tec) {
      if (tec) return;
      expired = true;
      boost::system::error_code cec;
      sock->cancel(cec);
    });
    boost::system::error_code ec;
    size_t n = co_await asio::async_read(*sock, asio::buffer(greeting), asio::redirect_error(asio::use_awaitable, ec));
    timer.cancel();
    if (!ec) co_return Greeted{std::move(*sock), greeting.substr(0, n)};
    if (expired)
      last = {ErrorCode::kTimeout, "no greeting from the screen"};
    else
      last = {ec == asio::error::eof ? ErrorCode::kClosed : ErrorCode::kIo, ec.message()};
    log::Warn(kViewerLog, "sandbox {}: viewer connection {} of {}: {}", sandbox_id, attempt, kAttempts,
              last.message);
    boost::system::error_code cec;
    sock->close(cec);
  }
  co_return std::unexpected(std::move(last));
}

void ViewerBridge::CloseSandbox(const std::string& sandbox_id, const std::string& reason) {
  auto it = sessions_.find(sandbox_id);
  if (it == sessions_.end()) return;
  for (Session* s : it->second) {
    if (s->close_reason.empty()) s->close_reason = reason;
    boost::system::error_code ec;
    s->guest.close(ec);  // GuestToViewer ends and closes the viewer
  }
}

void ViewerBridge::CloseActor(const std::string& actor_id, const std::string& reason) {
  for (auto& [id, sessions] : sessions_)
    for (Session* s : sessions) {
      if (s->actor.id() != actor_id) continue;
      if (s->close_reason.empty()) s->close_reason = reason;
      boost::system::error_code ec;
      s->guest.close(ec);
    }
}

}  // namespace deskbox::vnc_bridge
