#pragma once
// Route tests without root, QEMU or a guest: LoopbackServer serves a handler behind a real
// HttpServer on 127.0.0.1:0, run on its own thread, and sends requests from the test's thread;
// RouteHarness puts a bare Router behind it.
#include <unistd.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>

#include "api/credentials.h"
#include "api/http_server.h"
#include "api/metrics.h"
#include "api/router.h"
#include "fake_clock.h"

namespace deskbox::api {

struct ClientResponse {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> headers;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class LoopbackServer {
 public:
  ~LoopbackServer() { Stop(); }
  boost::asio::io_context& io() { return io_; }

  void Start(HttpHandler handler) {
    server_ = std::make_unique<HttpServer>(io_.get_executor(), std::move(handler));
    auto ep = server_->Listen("127.0.0.1", 0);
    port_ = ep->port();
    server_->Start();
    guard_.emplace(io_.get_executor());
    thread_ = std::thread([this] { io_.run(); });
  }
  void Stop() {
    if (!thread_.joinable()) return;
    boost::asio::post(io_, [this] {
      server_->Stop();
      guard_.reset();
    });
    io_.stop();
    thread_.join();
  }
  // Runs `f` on the server's thread and waits for it (what is served lives there).
  template <typename F>
  auto OnServer(F f) {
    std::packaged_task<decltype(f())()> task(std::move(f));
    auto done = task.get_future();
    boost::asio::post(io_, [&task] { task(); });
    return done.get();
  }
  uint16_t port() const { return port_; }

  ClientResponse Send(boost::beast::http::verb method, const std::string& target, const std::string& bearer = "",
                      std::map<std::string, std::string> headers = {}, const std::string& body = "") {
    namespace http = boost::beast::http;
    boost::asio::io_context client_io;
    boost::asio::ip::tcp::socket sock(client_io);
    sock.connect({boost::asio::ip::make_address("127.0.0.1"), port_});
    http::request<http::string_body> req(method, target, 11);
    req.set(http::field::host, "127.0.0.1:" + std::to_string(port_));
    if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    if (!body.empty() || method == http::verb::post || method == http::verb::put || method == http::verb::patch)
      req.prepare_payload();
    // A server that refuses a body answers before reading it all, and may close meanwhile:
    // the answer is read even when the write did not finish.
    boost::system::error_code write_ec;
    http::write(sock, req, write_ec);
    boost::beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    if (method == http::verb::head) parser.skip(true);
    http::read(sock, buf, parser);
    auto res = parser.release();
    ClientResponse out;
    out.status = res.result_int();
    out.body = res.body();
    for (const auto& f : res) out.headers[std::string(f.name_string())] = std::string(f.value());
    return out;
  }

 private:
  boost::asio::io_context io_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  uint16_t port_ = 0;
};

class RouteHarness {
 public:
  explicit RouteHarness(const std::string& name) {
    dir_ = std::filesystem::temp_directory_path() / ("deskbox-routes-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::create_directories(dir_);
    store_ = std::move(*Store::Open((dir_ / "db").string()));
    credentials_ = std::make_unique<Credentials>(*store_);
    (void)credentials_->Load();
    router_ = std::make_unique<Router>(*credentials_, metrics_, clock_);
  }
  ~RouteHarness() {
    server_.Stop();
    std::filesystem::remove_all(dir_);
  }

  Router& router() { return *router_; }
  Credentials& credentials() { return *credentials_; }
  FakeClock& clock() { return clock_; }
  void Start() {
    server_.Start([this](Exchange& ex) { return router_->Handle(ex); });
  }
  template <typename F>
  auto OnServer(F f) {
    return server_.OnServer(std::move(f));
  }
  std::string NewKey() { return credentials_->CreateKey("test", clock_.NowMs())->second; }
  std::string NewToken(const std::string& sandbox, Scope scope, int64_t ttl_ms = 3600000) {
    return credentials_->CreateToken(sandbox, scope, ttl_ms, "key_test", clock_.NowMs())->second;
  }
  ClientResponse Send(boost::beast::http::verb method, const std::string& target, const std::string& bearer = "",
                      std::map<std::string, std::string> headers = {}, const std::string& body = "") {
    return server_.Send(method, target, bearer, std::move(headers), body);
  }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<Credentials> credentials_;
  Metrics metrics_;
  FakeClock clock_;
  std::unique_ptr<Router> router_;
  LoopbackServer server_;
};

}  // namespace deskbox::api
