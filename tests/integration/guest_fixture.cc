#include "guest_fixture.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/slot_network.h"
#include "vmhost/devtools_http.h"

namespace deskbox::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

// ctest pipes stdout; keep failures readable when a test is killed at its timeout.
const bool kLineBufferedStdout = [] {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  return true;
}();

}  // namespace

vmhost::VmHostConfig GuestTest::Config() {
  return host_->BaseConfig();
}

void GuestTest::SetUp() {
  host_ = std::make_unique<TestHost>();
  auto started = host_->Start();
  ASSERT_TRUE(started) << started.error();
  env_ = host_->env();
  io_ = &host_->io();
  jailer_ = &host_->jailer();
  manager_ = std::make_unique<vmhost::SandboxManager>(io_->get_executor(), *jailer_, Config());
  auto m = manager_->Start();
  ASSERT_TRUE(m) << m.error().message;
}

void GuestTest::TearDown() {
  if (manager_) RunVoid(manager_->Shutdown(), 120s);
  manager_.reset();
  host_.reset();
}

void GuestTest::RunVoid(asio::awaitable<void> aw, std::chrono::seconds timeout) {
  Run(
      [](asio::awaitable<void> a) -> asio::awaitable<bool> {
        co_await std::move(a);
        co_return true;
      }(std::move(aw)),
      timeout);
}

bool GuestTest::WaitUntil(std::function<bool()> done, std::chrono::milliseconds timeout) {
  return Run(
      [](std::function<bool()> done, std::chrono::milliseconds timeout) -> asio::awaitable<bool> {
        auto deadline = std::chrono::steady_clock::now() + timeout;
        asio::steady_timer t(co_await asio::this_coro::executor);
        while (!done()) {
          if (std::chrono::steady_clock::now() >= deadline) co_return false;
          t.expires_after(50ms);
          co_await t.async_wait(asio::use_awaitable);
        }
        co_return true;
      }(std::move(done), timeout),
      std::chrono::duration_cast<std::chrono::seconds>(timeout) + 30s);
}

void GuestTest::AbandonGuests() {
  if (manager_)
    for (const auto& sb : manager_->List())
      if (sb->qemu_pid() > 0) ::kill(sb->qemu_pid(), SIGKILL);
  if (host_) host_->KillJailer();
  std::fflush(stdout);
}

std::shared_ptr<vmhost::Sandbox> GuestTest::CreateOrDie(bool wait_browser) {
  auto sb = Run(manager_->Create());
  if (!sb) {
    ADD_FAILURE() << "create: " << sb.error().message;
    return nullptr;
  }
  if (wait_browser) {
    auto fresh = Run(manager_->WaitBrowserFresh(*sb, 180s), 200s);
    if (!fresh) {
      ADD_FAILURE() << "browser refresh: " << fresh.error().message;
      return nullptr;
    }
  }
  return *sb;
}

std::string GuestTest::Exec(vmhost::Sandbox& sb, const std::string& shell) {
  agent::v1::Request req;
  req.mutable_exec()->set_shell(shell);
  req.mutable_exec()->set_timeout_s(60);
  auto r = Run(sb.agent()->Call(std::move(req), 90s));
  if (!r) {
    ADD_FAILURE() << "exec '" << shell << "': " << r.error().message;
    return {};
  }
  const auto& e = r->exec();
  EXPECT_EQ(e.exit_code(), 0) << shell << ": " << e.stderr();
  return e.stdout();
}

std::string GuestTest::RfbBanner(vmhost::Sandbox& sb) {
  return Run([&]() -> asio::awaitable<std::string> {
    auto s = co_await manager_->ConnectGuest(sb.slot(), slot_network::kGuestRfbPort,
                                             std::chrono::seconds(5));
    if (!s) co_return "connect failed: " + s.error().message;
    std::string b(12, '\0');
    boost::system::error_code ec;
    co_await asio::async_read(*s, asio::buffer(b), asio::redirect_error(asio::use_awaitable, ec));
    co_return ec ? "read failed: " + ec.message() : b;
  }());
}

std::string GuestTest::CdpHttp(vmhost::Sandbox& sb, const std::string& method,
                               const std::string& path) {
  auto result = Run(
      [&]() -> asio::awaitable<std::expected<std::string, std::string>> {
        // A guest starved by a pool refill beside it can leave one connect unanswered for
        // seconds: nothing was sent yet, so connecting again is safe for any method.
        auto deadline = std::chrono::steady_clock::now() + 80s;
        auto s = co_await manager_->ConnectGuest(sb.slot(), slot_network::kGuestCdpPort, 5s);
        while (!s && std::chrono::steady_clock::now() < deadline) {
          std::fprintf(stderr, "%s %s: %s; connecting again\n", method.c_str(), path.c_str(),
                       s.error().message.c_str());
          asio::steady_timer pause(co_await asio::this_coro::executor, 500ms);
          co_await pause.async_wait(asio::use_awaitable);
          s = co_await manager_->ConnectGuest(sb.slot(), slot_network::kGuestCdpPort, 5s);
        }
        if (!s) co_return std::unexpected(s.error().message);
        auto answer =
            co_await vmhost::DevToolsHttp(std::move(*s), beast::http::string_to_verb(method), path,
                                          {.body_bytes = 4u << 20, .timeout = 60s});
        if (!answer) co_return std::unexpected("HTTP response: " + answer.error().message);
        co_return std::move(answer->body);
      }(),
      90s);
  if (!result) {
    ADD_FAILURE() << method << " " << path << ": " << result.error();
    return {};
  }
  return *result;
}

std::string GuestTest::CdpEvaluate(vmhost::Sandbox& sb, const std::string& expression,
                                   const std::string& target_id) {
  // A page may be starting a renderer or navigating (a test just opened it): retry until it
  // answers.
  std::string last_error;
  auto deadline = std::chrono::steady_clock::now() + 120s;
  int attempts = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    ++attempts;
    auto r = CdpEvaluateOnce(sb, expression, target_id);
    if (r) return *r;
    last_error = r.error();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ADD_FAILURE() << "evaluate " << expression << ": " << attempts
                << " attempts in 120 s, last: " << last_error;
  RunVoid(manager_->LogGuestState(sb, "CDP evaluate failed"), 60s);
  return {};
}

std::expected<std::string, std::string> GuestTest::CdpEvaluateOnce(vmhost::Sandbox& sb,
                                                                   const std::string& expression,
                                                                   const std::string& target_id) {
  json targets = json::parse(CdpHttp(sb, "GET", "/json/list"), nullptr, false);
  std::string ws_path;
  if (targets.is_array()) {
    for (const auto& t : targets) {
      if (t.value("type", "") != "page") continue;
      if (!target_id.empty() && t.value("id", "") != target_id) continue;
      ws_path = "/devtools/page/" + t.value("id", "");
      break;
    }
  }
  if (ws_path.empty()) return std::unexpected(std::string("no page target"));
  auto result = Run(
      [&]() -> asio::awaitable<std::expected<std::string, std::string>> {
        auto s = co_await manager_->ConnectGuest(sb.slot(), slot_network::kGuestCdpPort, 5s);
        if (!s) co_return std::unexpected(s.error().message);
        beast::websocket::stream<asio::ip::tcp::socket> ws(std::move(*s));
        beast::websocket::stream_base::timeout limits{};
        limits.handshake_timeout = std::chrono::seconds(10);
        limits.idle_timeout = std::chrono::seconds(10);
        limits.keep_alive_pings = false;
        ws.set_option(limits);
        boost::system::error_code ec;
        co_await ws.async_handshake(slot_network::GuestCdpHostPort(), ws_path,
                                    asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return std::unexpected("websocket handshake: " + ec.message());
        json msg = {
            {"id", 1},
            {"method", "Runtime.evaluate"},
            {"params",
             {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}}}};
        std::string text = msg.dump();
        co_await ws.async_write(asio::buffer(text), asio::redirect_error(asio::use_awaitable, ec));
        if (ec) co_return std::unexpected("websocket write: " + ec.message());
        for (int i = 0; i < 100; ++i) {
          beast::flat_buffer buf;
          co_await ws.async_read(buf, asio::redirect_error(asio::use_awaitable, ec));
          if (ec) co_return std::unexpected("websocket read: " + ec.message());
          json r = json::parse(beast::buffers_to_string(buf.data()), nullptr, false);
          if (r.is_object() && r.value("id", 0) == 1) {
            if (r.contains("error")) co_return std::unexpected(r["error"].dump());
            co_return r["result"]["result"].value("value", json()).dump();
          }
        }
        co_return std::unexpected(std::string("no answer"));
      }(),
      60s);
  return result;
}

}  // namespace deskbox::testing
