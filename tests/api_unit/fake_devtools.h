#pragma once
// FakeDevTools: a guest Chromium's DevTools server for the API's route tests, listening on
// 127.0.0.1 and served on its own thread (FakeSandboxHost::guest_ports maps kGuestCdpPort to
// port()). Like Chromium it answers
//   GET /json/version, GET /json/list (and /json), PUT /json/new?<url>,
//   GET /json/activate/<target>, GET /json/close/<target>   (404 for a target it does not have)
// with every URL naming the guest's own address (ws://10.88.0.2:9222/devtools/...), which
// deskboxd must rewrite, and accepts WebSockets on /devtools/browser/<its id> and
// /devtools/page/<target>, answering each CDP command {"id": n, "method": m} with
// {"id": n, "result": {"method": m}}. It starts with one page, "New Tab".
// A test can make it misbehave: answer what is not JSON (kGarbage), answer every request with
// 500 (kFailing), or refuse WebSocket handshakes with 500 (kRefusingSockets).
//
// Threads: its own; the controls and records may be used from any thread. The destructor
// closes every connection and joins the thread.
#include "fake_service_util.h"
#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace deskbox::api::testing {

class FakeDevTools {
 public:
  enum class Behaviour { kNormal, kGarbage, kFailing, kRefusingSockets };
  static constexpr char kBrowserId[] = "6b1f3c8e-2d4a-4f7b-9a0c-5e8d7f6a1b2c";
  static constexpr char kFirstPage[] = "8C2F6A0D5B1E4F3A9C7D2E1F0A3B4C5D";

  FakeDevTools() {
    namespace asio = boost::asio;
    targets_.push_back({kFirstPage, "New Tab", "chrome://newtab/"});
    port_ = ListenOnLoopback(acceptor_);
    asio::co_spawn(io_, Accept(), asio::detached);
    thread_ = std::thread([this] { io_.run(); });
  }
  ~FakeDevTools() {
    boost::asio::post(io_, [this] {
      boost::system::error_code ec;
      acceptor_.close(ec);
      for (auto* s : sockets_) s->close(ec);
      guard_.reset();
    });
    thread_.join();
  }
  FakeDevTools(const FakeDevTools&) = delete;
  FakeDevTools& operator=(const FakeDevTools&) = delete;

  uint16_t port() const { return port_; }
  void SetBehaviour(Behaviour b) {
    std::lock_guard lock(mutex_);
    behaviour_ = b;
  }
  // Records: "METHOD target" of every HTTP request (handshakes included), in order; the text
  // of every WebSocket message received.
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }
  std::vector<std::string> messages() const {
    std::lock_guard lock(mutex_);
    return messages_;
  }
  std::vector<std::string> target_ids() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> ids;
    for (const auto& t : targets_) ids.push_back(t.id);
    return ids;
  }
  size_t sockets_open() const {  // WebSocket sessions now
    std::lock_guard lock(mutex_);
    return sockets_open_;
  }
  bool WaitFor(const std::function<bool()>& done,
               std::chrono::milliseconds timeout = std::chrono::seconds(5)) const {
    return PollUntil(done, timeout);
  }

 private:
  using Stream = boost::beast::tcp_stream;
  using Request = boost::beast::http::request<boost::beast::http::string_body>;
  using Response = boost::beast::http::response<boost::beast::http::string_body>;
  struct Target {
    std::string id, title, url;
  };
  static constexpr char kGuest[] = "10.88.0.2:9222";

  nlohmann::json TargetJson(const Target& t) const {
    return {{"description", ""},
            {"devtoolsFrontendUrl",
             fmt::format("/devtools/inspector.html?ws={}/devtools/page/{}", kGuest, t.id)},
            {"id", t.id},
            {"title", t.title},
            {"type", "page"},
            {"url", t.url},
            {"webSocketDebuggerUrl", fmt::format("ws://{}/devtools/page/{}", kGuest, t.id)}};
  }

  // The answer to one /json request (under mutex_).
  Response Answer(const Request& req) {
    namespace http = boost::beast::http;
    Response res{http::status::ok, req.version()};
    res.set(http::field::content_type, "application/json; charset=UTF-8");
    std::string target(req.target());
    std::string path = target.substr(0, target.find('?'));
    auto known = [&](const std::string& id) {
      return std::find_if(targets_.begin(), targets_.end(),
                          [&](const Target& t) { return t.id == id; });
    };
    if (behaviour_ == Behaviour::kGarbage) {
      res.body() = "<html>this is not the DevTools JSON you were looking for</html>";
    } else if (behaviour_ == Behaviour::kFailing) {
      res.result(http::status::internal_server_error);
      res.body() = "the browser is having a bad day";
    } else if (req.method() == http::verb::get && path == "/json/version") {
      res.body() =
          nlohmann::json{{"Browser", "Chrome/156.0.8078.108"},
                         {"Protocol-Version", "1.3"},
                         {"User-Agent",
                          "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
                          "Chrome/156.0.0.0 Safari/537.36"},
                         {"V8-Version", "15.6.178.12"},
                         {"WebKit-Version", "537.36 (@0123456789abcdef0123456789abcdef01234567)"},
                         {"webSocketDebuggerUrl",
                          fmt::format("ws://{}/devtools/browser/{}", kGuest, kBrowserId)}}
              .dump();
    } else if (req.method() == http::verb::get && (path == "/json/list" || path == "/json")) {
      nlohmann::json list = nlohmann::json::array();
      for (const auto& t : targets_) list.push_back(TargetJson(t));
      res.body() = list.dump();
    } else if (req.method() == http::verb::put && path == "/json/new") {
      auto q = target.find('?');
      Target t{fmt::format("{:032X}", 0xA000 + ++opened_), "",
               q == std::string::npos ? "about:blank" : target.substr(q + 1)};
      targets_.push_back(t);
      res.body() = TargetJson(t).dump();
    } else if (req.method() == http::verb::get &&
               (path.starts_with("/json/activate/") || path.starts_with("/json/close/"))) {
      bool close = path.starts_with("/json/close/");
      std::string id = path.substr(path.rfind('/') + 1);
      res.set(http::field::content_type, "text/plain");
      auto it = known(id);
      if (it == targets_.end()) {
        res.result(http::status::not_found);
        res.body() = "No such target id: " + id;
      } else if (close) {
        targets_.erase(it);
        res.body() = "Target is closing";
      } else {
        res.body() = "Target activated";
      }
    } else {
      res.result(http::status::not_found);
      res.set(http::field::content_type, "text/plain");
      res.body() = "Unknown command: " + path;
    }
    return res;
  }

  boost::asio::awaitable<void> Accept() {
    namespace asio = boost::asio;
    for (;;) {
      boost::system::error_code ec;
      auto s = co_await acceptor_.async_accept(asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      asio::co_spawn(io_, Serve(std::move(s)), asio::detached);
    }
  }

  boost::asio::awaitable<void> Serve(boost::asio::ip::tcp::socket sock) {
    namespace asio = boost::asio;
    namespace beast = boost::beast;
    namespace http = beast::http;
    namespace websocket = beast::websocket;
    Stream stream(std::move(sock));
    sockets_.insert(&stream.socket());
    beast::flat_buffer buf;
    Request req;
    boost::system::error_code ec;
    co_await http::async_read(stream, buf, req, asio::redirect_error(asio::use_awaitable, ec));
    if (ec) {
      sockets_.erase(&stream.socket());
      co_return;
    }
    Behaviour behaviour;
    std::string path(req.target());
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(fmt::format("{} {}", std::string(req.method_string()), path));
      behaviour = behaviour_;
    }
    if (websocket::is_upgrade(req)) {
      bool known = path == std::string("/devtools/browser/") + kBrowserId;
      {
        std::lock_guard lock(mutex_);
        for (const auto& t : targets_) known = known || path == "/devtools/page/" + t.id;
      }
      if (behaviour == Behaviour::kRefusingSockets || !known) {
        Response res{behaviour == Behaviour::kRefusingSockets ? http::status::internal_server_error
                                                              : http::status::not_found,
                     req.version()};
        res.body() = known ? "refused" : "No such target id: " + path;
        res.prepare_payload();
        co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
        sockets_.erase(&stream.socket());
        co_return;
      }
      sockets_.erase(&stream.socket());
      co_await Relay(websocket::stream<Stream>(std::move(stream)), std::move(req));
      co_return;
    }
    Response res;
    {
      std::lock_guard lock(mutex_);
      res = Answer(req);
    }
    res.keep_alive(false);
    res.prepare_payload();
    co_await http::async_write(stream, res, asio::redirect_error(asio::use_awaitable, ec));
    stream.socket().shutdown(asio::ip::tcp::socket::shutdown_both, ec);
    sockets_.erase(&stream.socket());
  }

  boost::asio::awaitable<void> Relay(boost::beast::websocket::stream<Stream> ws, Request req) {
    namespace asio = boost::asio;
    namespace beast = boost::beast;
    boost::system::error_code ec;
    auto* socket = &beast::get_lowest_layer(ws).socket();
    sockets_.insert(socket);
    co_await ws.async_accept(req, asio::redirect_error(asio::use_awaitable, ec));
    {
      std::lock_guard lock(mutex_);
      ++sockets_open_;
    }
    beast::flat_buffer buf;
    while (!ec) {
      co_await ws.async_read(buf, asio::redirect_error(asio::use_awaitable, ec));
      if (ec) break;
      std::string text = beast::buffers_to_string(buf.data());
      buf.consume(buf.size());
      {
        std::lock_guard lock(mutex_);
        messages_.push_back(text);
      }
      auto command = nlohmann::json::parse(text, nullptr, false);
      if (!command.is_object()) continue;
      nlohmann::json answer = {{"id", command.value("id", 0)},
                               {"result", {{"method", command.value("method", "")}}}};
      ws.text(true);
      co_await ws.async_write(asio::buffer(answer.dump()),
                              asio::redirect_error(asio::use_awaitable, ec));
    }
    {
      std::lock_guard lock(mutex_);
      --sockets_open_;
    }
    sockets_.erase(socket);
  }

  boost::asio::io_context io_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> guard_{
      io_.get_executor()};
  boost::asio::ip::tcp::acceptor acceptor_{io_};
  uint16_t port_ = 0;
  std::set<boost::asio::ip::tcp::socket*> sockets_;  // the server thread's: closed at the end
  std::thread thread_;

  mutable std::mutex mutex_;
  Behaviour behaviour_ = Behaviour::kNormal;
  std::vector<Target> targets_;
  unsigned opened_ = 0;
  std::vector<std::string> requests_, messages_;
  size_t sockets_open_ = 0;
};

}  // namespace deskbox::api::testing
