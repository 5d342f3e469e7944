#pragma once
// CdpProxy: Playwright, Puppeteer and other CDP clients reach the guest's Chromium through
// deskboxd. WebSocket sessions are relayed message by message between the client and a
// WebSocket that deskboxd opens to the guest (slot_network::kGuestIPv4, kGuestCdpPort, over a
// TCP socket made inside the sandbox's netns — the guest never names where we dial). Each
// direction has one message in flight: a slow reader slows its writer instead of growing memory.
// Client→browser messages are audited (method name, never params) into the sandbox's event log
// and counted per method. When a sandbox is paused, stopped or destroyed, or the token a session
// was opened with is revoked or expires, the session ends with a close frame that says why.
//
// Threads: one io_context thread (deskboxd's).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/verb.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "cdp_proxy/error.h"
#include "recorder/event_sink.h"
#include "vmhost/devtools_http.h"

namespace deskbox::cdp_proxy {

// Opens TCP connections to a sandbox's guest CDP port (inside its netns). Errors: kClosed (the
// sandbox is not running), kGuest (the guest refused), kTimeout, kIo (no socket was made).
class GuestDialer {
 public:
  virtual ~GuestDialer() = default;
  virtual boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, Error>> DialCdp(
      const std::string& sandbox_id) = 0;
  // A connection for GET /json/version only, which the browser process answers and no page
  // does: a dialer that holds page access back (while pages reload) may let it through earlier.
  virtual boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, Error>> DialCdpVersion(
      const std::string& sandbox_id) {
    return DialCdp(sandbox_id);
  }
};

struct CdpProxyOptions {
  // Largest WebSocket message relayed either way: full-page screenshots of long pages come back
  // as one base64 message of tens of MiB.
  uint64_t max_message_bytes = 256ull << 20;
  size_t max_sessions_per_sandbox = 32;
  std::chrono::seconds guest_timeout{15};  // /json answers and the guest-side handshake
  size_t max_counted_methods = 1000;       // distinct method names in metrics; others count as "other"
};

using GuestHttpAnswer = vmhost::DevToolsAnswer;  // status and body

class CdpProxy {
 public:
  CdpProxy(boost::asio::any_io_executor executor, GuestDialer& dialer, recorder::EventSink& events,
           CdpProxyOptions options = {});
  ~CdpProxy();

  // One request to the guest's DevTools HTTP endpoint (e.g. GET /json/list), through
  // vmhost::DevToolsHttp: head and body capped (kMaxGuestJson), options.guest_timeout for the
  // exchange. Any status is an answer; the error says why there is none: the dialer's, or
  // kIo (sending), kClosed (the answer cut short), kTimeout, kGuest (no usable HTTP answer),
  // kBadTarget.
  boost::asio::awaitable<std::expected<GuestHttpAnswer, Error>> GuestHttp(
      const std::string& sandbox_id, boost::beast::http::verb method, const std::string& target);

  // Takes over an HTTP connection whose request asks for a WebSocket upgrade, opens the guest
  // side (`guest_path` is /devtools/browser/<id> or /devtools/page/<id>), then relays until either
  // side ends. If the guest cannot be reached the client gets an HTTP error instead of a 101.
  // `request_id` goes into the X-Request-Id header of the 101 or the error.
  boost::asio::awaitable<void> Run(boost::beast::tcp_stream stream,
                                   boost::beast::http::request<boost::beast::http::buffer_body> request,
                                   std::string sandbox_id, std::string guest_path, recorder::v1::Actor actor,
                                   std::string request_id);

  // Ends every session of the sandbox with a close frame (1001 "going away") carrying `reason`.
  void CloseSandbox(const std::string& sandbox_id, const std::string& reason);
  // Ends every session whose actor has this id (a revoked or expired token), the same way.
  void CloseActor(const std::string& actor_id, const std::string& reason);
  size_t Sessions(const std::string& sandbox_id) const;
  size_t TotalSessions() const;
  bool AtSessionLimit(const std::string& sandbox_id) const;
  const std::map<std::string, uint64_t>& method_counts() const { return method_counts_; }

  struct Session;

 private:
  void Count(const std::string& method);
  void End(Session& s, const std::string& reason);  // closes the guest side; the client follows
  boost::asio::awaitable<void> ClientToGuest(std::shared_ptr<Session> s);
  boost::asio::awaitable<void> GuestToClient(std::shared_ptr<Session> s);

  boost::asio::any_io_executor executor_;
  GuestDialer& dialer_;
  recorder::EventSink& events_;
  CdpProxyOptions options_;
  std::map<std::string, std::set<Session*>> sessions_;
  std::map<std::string, uint64_t> method_counts_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deskbox::cdp_proxy
