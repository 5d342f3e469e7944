#pragma once
// ServiceHarness: the whole API (ApiService: router, registry, every role) against a
// FakeSandboxHost and a FakeClock, with a real Store, event log and HTTP server on 127.0.0.1:0.
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <filesystem>

#include "api/service.h"
#include "fake_sandbox_host.h"
#include "route_harness.h"

namespace deskbox::api {

class ServiceHarness {
 public:
  explicit ServiceHarness(const std::string& name, std::function<void(DaemonConfig&)> configure = {}) {
    dir_ = std::filesystem::temp_directory_path() / ("deskbox-api-" + std::to_string(::getpid()) + "-" + name);
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    store_ = std::move(*Store::Open((dir_ / "deskbox.db").string()));
    recorder::LogEventSinkOptions eo;
    eo.dir = (dir_ / "events").string();
    events_ = std::move(*recorder::LogEventSink::Create(eo));
    config_.state_dir = dir_.string();
    config_.template_name = "desktop@test";
    config_.api_key = key_ = "dbk_" + std::string(64, 'a');
    config_.egress_resolvers = {"127.0.0.1:9"};
    config_.creates_per_second = 1000;
    if (configure) configure(config_);
  }
  ~ServiceHarness() {
    if (service_) {
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
  FakeClock& clock() { return clock_; }
  Store& store() { return *store_; }
  const std::string& key() const { return key_; }
  template <typename F>
  auto OnServer(F f) {
    return server_.OnServer(std::move(f));
  }
  ClientResponse Call(boost::beast::http::verb m, const std::string& target, const std::string& body = "",
                      std::optional<std::string> bearer = std::nullopt) {
    return server_.Send(m, target, bearer ? *bearer : key_, {}, body);
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
