#pragma once
// ViewerBridge: the live view. A browser viewer (noVNC) opens a WebSocket to deskboxd; the bridge
// opens its own RFB connection to the guest's Xvnc (a TCP socket made inside the sandbox's
// netns, like the mirror's) and relays binary messages both ways:
//  - guest → viewer: bytes as they come, one WebSocket message in flight. A viewer that takes
//    longer than `write_timeout` to accept one message is dropped: a slow viewer holds at most
//    one read buffer here, and Xvnc paces its own output to the connection (it sends an update
//    only when asked for one);
//  - viewer → guest: every byte through ClientFilter, which drops a view-only viewer's keyboard,
//    pointer and clipboard messages, forces shared sessions and ends the connection on anything
//    a viewer has no reason to send.
// Every viewer input is attributed: bursts of input messages become ViewerInput events (kind,
// dropped or not, count) in the sandbox's event log, at most one per kind per second and one at
// the end. When a sandbox is paused or stopped its viewers are closed with a reason; the page
// reconnects once it runs again.
//
// Threads: one io_context thread (deskboxd's).
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/message.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "recorder/event_sink.h"
#include "vnc_bridge/error.h"

namespace deskbox::vnc_bridge {

struct ViewerBridgeOptions {
  size_t max_viewers_per_sandbox = 32;
  size_t read_chunk = 64 * 1024;                   // guest bytes per WebSocket message, at most
  std::chrono::milliseconds write_timeout{30000};  // a viewer slower than this is dropped
  std::chrono::milliseconds input_report_interval{1000};
  std::chrono::milliseconds greeting_timeout{5000};  // the guest's RFB greeting after connecting
};

class ViewerBridge {
 public:
  // Opens a TCP connection to the sandbox's guest RFB port (inside its netns), or says why not
  // (kClosed: the sandbox is not running; kTimeout; kIo).
  using Dialer =
      std::function<boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, Error>>(
          const std::string& sandbox_id)>;

  ViewerBridge(boost::asio::any_io_executor executor, Dialer dialer, recorder::EventSink& events,
               ViewerBridgeOptions options = {});
  ~ViewerBridge();

  // Takes over an HTTP connection whose request asks for a WebSocket upgrade, connects to the
  // guest, then relays until either side ends. If the guest cannot be reached (or the sandbox
  // has all the viewers it may have) the client gets an HTTP error with a JSON body instead.
  boost::asio::awaitable<void> Run(boost::beast::tcp_stream stream,
                                   boost::beast::http::request<boost::beast::http::buffer_body> request,
                                   std::string sandbox_id, recorder::v1::Actor actor, bool may_control,
                                   std::string request_id);
  // Ends every viewer of the sandbox with a close frame (1001 "going away") carrying `reason`.
  void CloseSandbox(const std::string& sandbox_id, const std::string& reason);
  // Ends every viewer whose actor has this id (a revoked or expired token), the same way.
  void CloseActor(const std::string& actor_id, const std::string& reason);
  size_t Viewers(const std::string& sandbox_id) const;
  size_t TotalViewers() const;

  struct Session;

 private:
  // A connection to the guest and the RFB greeting it has sent on it.
  struct Greeted {
    boost::asio::ip::tcp::socket socket;
    std::string greeting;
  };
  // Connects to the guest and reads its RFB greeting, pacing a burst of viewers so that the
  // guest's accept queue never overflows. Errors: the dialer's, kTimeout (no greeting), kClosed /
  // kIo (the connection), kTooLarge (too many viewers connecting).
  boost::asio::awaitable<std::expected<Greeted, Error>> DialGreeted(const std::string& sandbox_id);
  boost::asio::awaitable<void> ViewerToGuest(std::shared_ptr<Session> s);
  boost::asio::awaitable<void> GuestToViewer(std::shared_ptr<Session> s);
  void Report(Session& s, bool final);

  boost::asio::any_io_executor executor_;
  Dialer dialer_;
  recorder::EventSink& events_;
  ViewerBridgeOptions options_;
  std::map<std::string, std::set<Session*>> sessions_;
  std::map<std::string, size_t> dials_;  // per sandbox: connections waiting for the greeting
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deskbox::vnc_bridge
