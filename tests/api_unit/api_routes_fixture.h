#pragma once
// The fixture of the API's route tests: the whole service against fakes (ServiceHarness), and
// helpers to read answers.
#include <gtest/gtest.h>

#include <thread>

#include "api/json_input.h"
#include "service_harness.h"

namespace deskbox::api {

using boost::beast::http::verb;
using nlohmann::json;

inline json Body(const ClientResponse& r) { return ParseJson(r.body).value_or(json()); }
inline std::string Code(const ClientResponse& r) {
  auto j = Body(r);
  return j.is_object() && j.contains("error") ? j["error"].value("code", "") : "";
}
inline std::string TestName() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }


class ApiRoutesTest : public ::testing::Test {
 protected:
  explicit ApiRoutesTest(std::function<void(DaemonConfig&)> configure = {}) : h_(TestName(), std::move(configure)) {}
  void SetUp() override { h_.Start(); }

  std::string Create(const json& body = json::object()) {
    auto r = h_.Call(verb::post, "/v1/sandboxes", body.dump());
    EXPECT_EQ(r.status, 201u) << r.body;
    return Body(r).value("id", "");
  }
  std::string State(const std::string& id) { return Body(h_.Call(verb::get, "/v1/sandboxes/" + id)).value("state", ""); }
  std::string Token(const std::string& id, const std::string& scope, int ttl_s = 3600) {
    auto r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", json{{"scope", scope}, {"ttl_s", ttl_s}}.dump());
    EXPECT_EQ(r.status, 201u) << r.body;
    return Body(r).value("token", "");
  }
  // Polls until the sandbox is in `state` (the timeout clock ticks every 250 ms on the server).
  bool WaitState(const std::string& id, const std::string& state) {
    for (int i = 0; i < 40; ++i) {
      if (State(id) == state) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  ServiceHarness h_;
};

}  // namespace deskbox::api
