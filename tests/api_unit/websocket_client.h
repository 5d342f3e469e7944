#pragma once
// WebSocketClient: a blocking WebSocket client (Beast) for the route tests of deskboxd's
// WebSocket endpoints (the live view, CDP). Every operation has a deadline, so a test that
// waits for something that never comes fails instead of hanging.
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace deskbox::api::testing {

class WebSocketClient {
 public:
  // Connects to 127.0.0.1:`port` and asks to upgrade `target`, with `headers` on the request.
  WebSocketClient(uint16_t port, const std::string& target,
                  const std::map<std::string, std::string>& headers = {},
                  std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    namespace beast = boost::beast;
    namespace websocket = beast::websocket;
    beast::get_lowest_layer(ws_).expires_after(timeout);
    boost::system::error_code ec;
    beast::get_lowest_layer(ws_).connect({boost::asio::ip::make_address("127.0.0.1"), port}, ec);
    if (ec) return;
    beast::get_lowest_layer(ws_).expires_never();
    ws_.set_option(websocket::stream_base::decorator([headers](websocket::request_type& req) {
      for (const auto& [k, v] : headers) req.set(k, v);
    }));
    bool done = false;
    ws_.async_handshake(response_, "127.0.0.1:" + std::to_string(port), target,
                        [&](boost::system::error_code e) {
                          ec = e;
                          done = true;
                        });
    bool answered = Run(done, timeout);
    if (answered && (!ec || ec == websocket::error::upgrade_declined))
      status_ = response_.result_int();
    open_ = answered && !ec && status_ == 101;
  }
  ~WebSocketClient() { Drop(); }
  WebSocketClient(const WebSocketClient&) = delete;
  WebSocketClient& operator=(const WebSocketClient&) = delete;

  bool open() const { return open_; }
  // 101 when open; otherwise the refusal's status (0 when there was no answer).
  unsigned status() const { return status_; }
  const boost::beast::websocket::response_type& response() const { return response_; }
  std::string header(const std::string& name) const {
    auto it = response_.find(name);
    return it == response_.end() ? "" : std::string(it->value());
  }

  // The next message, or nullopt when the connection closed or nothing came in time.
  std::optional<std::string> Read(std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    if (!open_) return std::nullopt;
    boost::beast::flat_buffer buf;
    boost::system::error_code ec;
    bool done = false;
    ws_.async_read(buf, [&](boost::system::error_code e, size_t) {
      ec = e;
      done = true;
    });
    if (!Run(done, timeout) || ec) {
      if (ec == boost::beast::websocket::error::closed) closed_ = ws_.reason();
      open_ = false;
      return std::nullopt;
    }
    binary_ = ws_.got_binary();
    return boost::beast::buffers_to_string(buf.data());
  }
  bool got_binary() const { return binary_; }
  // The close frame the server sent, once Read returned nullopt for it.
  const std::optional<boost::beast::websocket::close_reason>& closed() const { return closed_; }

  bool Write(const std::string& data, bool binary = false,
             std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
    if (!open_) return false;
    ws_.binary(binary);
    boost::system::error_code ec;
    bool done = false;
    ws_.async_write(boost::asio::buffer(data), [&](boost::system::error_code e, size_t) {
      ec = e;
      done = true;
    });
    return Run(done, timeout) && !ec;
  }

  // A clean close (close frame both ways), then the connection is dropped.
  void Close(std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
    if (open_) {
      bool done = false;
      ws_.async_close(boost::beast::websocket::close_code::normal,
                      [&](boost::system::error_code) { done = true; });
      Run(done, timeout);
      open_ = false;
    }
    Drop();
  }

 private:
  // Runs the io_context until `done` or `timeout`; on timeout the connection is cancelled and
  // the operation allowed to finish. False on timeout.
  bool Run(bool& done, std::chrono::milliseconds timeout) {
    io_.restart();
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done && std::chrono::steady_clock::now() < deadline)
      io_.run_one_for(std::chrono::milliseconds(20));
    if (done) return true;
    boost::system::error_code ec;
    boost::beast::get_lowest_layer(ws_).socket().cancel(ec);
    while (!done) io_.run_one_for(std::chrono::milliseconds(20));
    return false;
  }
  void Drop() {
    boost::system::error_code ec;
    auto& s = boost::beast::get_lowest_layer(ws_).socket();
    if (s.is_open()) {
      s.shutdown(boost::asio::ip::tcp::socket::shutdown_both, ec);
      s.close(ec);
    }
    open_ = false;
  }

  boost::asio::io_context io_;
  boost::beast::websocket::stream<boost::beast::tcp_stream> ws_{io_};
  boost::beast::websocket::response_type response_;
  std::optional<boost::beast::websocket::close_reason> closed_;
  unsigned status_ = 0;
  bool open_ = false;
  bool binary_ = false;
};

}  // namespace deskbox::api::testing
