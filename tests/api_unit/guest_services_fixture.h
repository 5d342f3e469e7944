#pragma once
// The fixture of the route tests that reach a guest's services: the whole API (ApiRoutesTest)
// against a FakeSandboxHost whose guests show their screen through a FakeRfbServer and run their
// browser as a FakeDevTools, both on 127.0.0.1 (every sandbox reaches the same two).
#include <memory>

#include "api_routes_fixture.h"
#include "common/slot_network.h"
#include "fake_devtools.h"
#include "fake_rfb_server.h"
#include "websocket_client.h"

namespace deskbox::api {

// A base of the fixture, so that the fakes are made before the service and outlive it.
struct GuestServices {
  testing::FakeRfbServer rfb;
  testing::FakeDevTools devtools;
};

class GuestServicesTest : protected GuestServices, public ApiRoutesTest {
 protected:
  explicit GuestServicesTest(std::function<void(DaemonConfig&)> configure = {})
      : ApiRoutesTest(std::move(configure)) {}
  void SetUp() override {
    ApiRoutesTest::SetUp();
    ConnectGuestServices();
  }

  // Runs `f` with the fake host on the server's thread.
  template <typename F>
  auto OnHost(F f) {
    return h_.OnServer([&] {
      if constexpr (std::is_void_v<decltype(f(h_.host()))>) {
        f(h_.host());
        return 0;
      } else {
        return f(h_.host());
      }
    });
  }
  // The guest ports lead to the fakes (again).
  void ConnectGuestServices() {
    OnHost([this](FakeSandboxHost& host) {
      host.guest_ports = {{slot_network::kGuestRfbPort, rfb.port()},
                          {slot_network::kGuestCdpPort, devtools.port()}};
    });
  }
  // Runs `f` with the fake guest agent of sandbox `id` on the server's thread.
  template <typename F>
  auto OnAgent(const std::string& id, F f) {
    return OnHost([&](FakeSandboxHost& host) { return f(*host.agents.at(id)); });
  }
  // Waits until the API holds no live connection (viewer, CDP session) to sandbox `id`: a test
  // ends only once its connections have, so that none outlives the service.
  bool WaitNotInUse(const std::string& id) {
    for (int i = 0; i < 400; ++i) {
      if (!OnHost([&](FakeSandboxHost& host) { return host.InUse(id); })) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  // A WebSocket to deskboxd.
  std::unique_ptr<testing::WebSocketClient> Socket(
      const std::string& target, std::map<std::string, std::string> headers = {}) {
    return std::make_unique<testing::WebSocketClient>(h_.port(), target, headers);
  }
  static std::map<std::string, std::string> Bearer(const std::string& secret) {
    return {{"Authorization", "Bearer " + secret}};
  }
};

}  // namespace deskbox::api
