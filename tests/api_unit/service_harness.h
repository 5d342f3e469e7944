#pragma once
// ServiceHarness: the whole API (ApiService: router, registry, every role) against a
// FakeSandboxHost and a FakeClock, with a real Store, event log and HTTP server on 127.0.0.1:0.
#include <unistd.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <filesystem>
#include <future>

#include "api/service.h"
#include "fake_sandbox_host.h"
#include "route_harness.h"

namespace deskbox::api {

class ServiceHarness {
 public:
  explicit ServiceHarness(const std::string& name, std::function<void(DaemonConfig&)> configure = {}) {
    std::string leaf = name;
    std::replace(leaf.begin(), leaf.end(), '/', '_');  // parameterized tests' names have one
    dir_ = std::filesystem::temp_directory_path() / ("deskbox-api-" + std::to_string(::getpid()) + "-" + leaf);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = std::move(*Store::Open((dir_ / "deskbox.db").string()));
    recorder::LogEventSinkOptions eo;
    eo.dir = (dir_ / "events").string();
    events_ = std::move(*recorder::LogEventSink::Create(eo));
    config_.state_dir = dir_.string();
    // As ParseConfig makes it of --state-dir (ApiService takes it as given).
    config_.recording_dir = (dir_ / "recordings").string();
    // Recording is off unless a test turns it on (recording_routes_test.cc): a recorder started
    // in the background connects a mirror to the fake screen and encodes, which the other route
    // tests do not test; and a recorder start still in flight when the service is destroyed
    // resumes into it (RecordingRoutes::StartRecorder and LoadIndex touch their object after
    // their pool work without checking it still exists).
    config_.recording = false;
    config_.template_name = "desktop@test";
    config_.api_key = key_ = "dbk_" + std::string(64, 'a');
    config_.egress_resolvers = {"127.0.0.1:9"};
    config_.creates_per_second = 1000;
    if (configure) configure(config_);
  }
  ~ServiceHarness() {
    if (service_) {
      // As deskboxd stops: screen mirrors stop and live connections close before the service
      // is destroyed, so nothing of it runs afterwards.
      auto stopped = std::make_shared<std::promise<void>>();
      auto done = stopped->get_future();
      server_.OnServer([this, stopped] {
        boost::asio::co_spawn(
            server_.io(),
            [this, stopped]() -> boost::asio::awaitable<void> {
              co_await service_->Shutdown();
              stopped->set_value();
            },
            boost::asio::detached);
        return 0;
      });
      done.wait_for(std::chrono::seconds(10));
      server_.OnServer([this] {
        service_.reset();
        return 0;
      });
    }
    server_.Stop();
    std::filesystem::remove_all(dir_);
  }
  // Loads, recovers (whatever records the store holds) and starts serving.
  void Start() {
    service_ = std::make_unique<ApiService>(server_.io().get_executor(), host_, *store_, *events_, config_, clock_);
    auto loaded = service_->Load();
    ASSERT_TRUE(loaded) << loaded.error();
    bool recovered = false;
    boost::asio::co_spawn(
        server_.io(),
        [this, &recovered]() -> boost::asio::awaitable<void> {
          co_await service_->Recover();
          recovered = true;
        },
        boost::asio::detached);
    for (int i = 0; i < 500 && !recovered; ++i) server_.io().run_one_for(std::chrono::milliseconds(10));
    server_.io().restart();
    ASSERT_TRUE(recovered);
    server_.Start([this](Exchange& ex) { return service_->Handle(ex); });
  }

  FakeSandboxHost& host() { return host_; }
  ApiService& service() { return *service_; }
  uint16_t port() const { return server_.port(); }
  FakeClock& clock() { return clock_; }
  Store& store() { return *store_; }
  recorder::LogEventSink& events() { return *events_; }
  const std::string& key() const { return key_; }
  const DaemonConfig& config() const { return config_; }
  template <typename F>
  auto OnServer(F f) {
    return server_.OnServer(std::move(f));
  }
  ClientResponse Call(boost::beast::http::verb m, const std::string& target, const std::string& body = "",
                      std::optional<std::string> bearer = std::nullopt) {
    return server_.Send(m, target, bearer ? *bearer : key_, {}, body);
  }
  // With headers of its own; `bearer` "" sends no Authorization header.
  ClientResponse Send(boost::beast::http::verb m, const std::string& target, const std::string& bearer,
                      std::map<std::string, std::string> headers, const std::string& body = "") {
    return server_.Send(m, target, bearer, std::move(headers), body);
  }

 private:
  std::filesystem::path dir_;
  std::string key_;
  DaemonConfig config_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<recorder::LogEventSink> events_;
  FakeSandboxHost host_;
  FakeClock clock_;
  LoopbackServer server_;
  std::unique_ptr<ApiService> service_;
};

}  // namespace deskbox::api
