// The API's routes against a fake vmhost and a fake clock: every response of the lifecycle,
// token, key, egress and guest routes that needs no guest, without root or QEMU.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <thread>

#include "api_routes_fixture.h"

namespace deskbox::api {
namespace {

using boost::beast::http::verb;
using nlohmann::json;
using vmhost::SandboxState;
using vmhost::VmError;

TEST_F(ApiRoutesTest, HealthIsOpenAndMetricsNeedAKey) {
  EXPECT_EQ(h_.Call(verb::get, "/healthz", "", "").status, 200u);
  EXPECT_EQ(h_.Call(verb::get, "/metrics", "", "").status, 401u);
  auto m = h_.Call(verb::get, "/metrics");
  EXPECT_EQ(m.status, 200u);
  EXPECT_NE(m.body.find("deskbox_sandboxes{state=\"running\"} 0"), std::string::npos) << m.body.substr(0, 400);
}

TEST_F(ApiRoutesTest, TemplatesListTheServedOne) {
  auto j = Body(h_.Call(verb::get, "/v1/templates"));
  ASSERT_EQ(j["templates"].size(), 1u);
  EXPECT_EQ(j["templates"][0]["name"], "desktop@test");
  EXPECT_EQ(j["templates"][0]["screen"]["width"], 1280);
}

TEST_F(ApiRoutesTest, CreateGetListAndDelete) {
  std::string id = Create({{"timeout_s", 120}, {"metadata", {{"team", "a"}}}});
  auto sb = Body(h_.Call(verb::get, "/v1/sandboxes/" + id));
  EXPECT_EQ(sb["state"], "running");
  EXPECT_EQ(sb["timeout_s"], 120);
  EXPECT_EQ(sb["metadata"]["team"], "a");
  EXPECT_EQ(sb["create_path"], "warm");
  EXPECT_TRUE(sb["expires_at"].is_string());
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/sandboxes"))["sandboxes"].size(), 1u);
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  EXPECT_EQ(State(id), "stopped");
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u) << "deleting again is no error";
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/sandboxes"))["sandboxes"].size(), 0u) << "stopped ones are not listed";
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/sandboxes?state=stopped"))["sandboxes"].size(), 1u);
  EXPECT_EQ(h_.OnServer([this] { return h_.host().alive(); }), 0u) << "the VM is gone";
}

TEST_F(ApiRoutesTest, CreateRefusesBadInputWithoutTouchingVmhost) {
  struct Case {
    json body;
    unsigned status;
    std::string code;
  };
  std::vector<Case> cases = {
      {{{"timeout_s", 0}}, 400, "invalid_request"},
      {{{"nope", 1}}, 400, "invalid_request"},
      {{{"on_timeout", "explode"}}, 400, "invalid_request"},
      {{{"metadata", {{"k", 1}}}}, 400, "invalid_request"},
      {{{"egress", {{"allow", "example.com"}}}}, 400, "invalid_request"},
      {{{"template", "other"}}, 422, "unknown_template"},
      {{{"resolution", {{"width", 100}, {"height", 100}}}}, 422, "unsupported_resolution"},
  };
  for (const auto& c : cases) {
    auto r = h_.Call(verb::post, "/v1/sandboxes", c.body.dump());
    EXPECT_EQ(r.status, c.status) << c.body.dump() << " → " << r.body;
    EXPECT_EQ(Code(r), c.code) << c.body.dump();
  }
  auto r = h_.Call(verb::post, "/v1/sandboxes", "{");
  EXPECT_EQ(Code(r), "invalid_json");
  r = h_.Call(verb::post, "/v1/sandboxes", std::string(2 << 20, ' '));
  EXPECT_EQ(r.status, 413u);
  EXPECT_EQ(h_.OnServer([this] { return h_.host().calls.size(); }), 1u) << "only the recovery reached vmhost";
}

TEST_F(ApiRoutesTest, VmhostFailuresMapToTheirAnswers) {
  h_.OnServer([this] {
    h_.host().fail_next_create = VmError{VmError::Code::kCapacity, "no free slot"};
    return 0;
  });
  auto r = h_.Call(verb::post, "/v1/sandboxes", "{}");
  EXPECT_EQ(r.status, 429u);
  EXPECT_EQ(Code(r), "sandbox_limit");
  h_.OnServer([this] {
    h_.host().fail_next_create = VmError{VmError::Code::kJailer, "jailer down"};
    return 0;
  });
  r = h_.Call(verb::post, "/v1/sandboxes", "{}");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(Code(r), "internal");
  // Egress that cannot be attached: no sandbox is handed out, and its VM is destroyed.
  h_.OnServer([this] {
    h_.host().fail_next_egress = VmError{VmError::Code::kJailer, "no sockets"};
    return 0;
  });
  r = h_.Call(verb::post, "/v1/sandboxes", "{}");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(h_.OnServer([this] { return h_.host().alive(); }), 0u);
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/sandboxes"))["sandboxes"].size(), 0u);
}

TEST_F(ApiRoutesTest, PauseResumeAndTheirConflicts) {
  std::string id = Create();
  auto r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/resume");
  EXPECT_EQ(r.status, 409u);
  EXPECT_EQ(Code(r), "invalid_state");
  r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause");
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["state"], "paused");
  EXPECT_TRUE(Body(r)["expires_at"].is_null());
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause").status, 409u);
  r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/exec", R"({"shell": "true"})");
  EXPECT_EQ(r.status, 409u) << "a paused sandbox runs nothing";
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/resume").status, 200u);
  EXPECT_EQ(State(id), "running");
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/sb-0000000000000000/pause").status, 404u);
  h_.OnServer([this] {
    h_.host().fail_next_pause = VmError{VmError::Code::kQemu, "QMP stop failed"};
    return 0;
  });
  r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause");
  EXPECT_EQ(r.status, 500u);
  EXPECT_EQ(State(id), "running") << "a failed pause changes nothing";
}

TEST_F(ApiRoutesTest, PatchChangesTimeoutMetadataAndDisplay) {
  std::string id = Create();
  auto r = h_.Call(verb::patch, "/v1/sandboxes/" + id,
                   json{{"timeout_s", 30}, {"metadata", {{"x", "y"}}}, {"display", "1024x640"}}.dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["timeout_s"], 30);
  EXPECT_EQ(Body(r)["display"]["width"], 1024);
  EXPECT_EQ(h_.Call(verb::patch, "/v1/sandboxes/" + id, R"({"timeout_s": -1})").status, 400u);
  EXPECT_EQ(h_.Call(verb::patch, "/v1/sandboxes/" + id, R"({"display": "wide"})").status, 400u);
  EXPECT_EQ(h_.Call(verb::patch, "/v1/sandboxes/sb-0000000000000000", "{}").status, 404u);
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  EXPECT_EQ(h_.Call(verb::patch, "/v1/sandboxes/" + id, R"({"timeout_s": 5})").status, 409u);
}

TEST_F(ApiRoutesTest, LimitsAreSetAtCreateChangedLiveAndShown) {
  auto calls = [this] { return h_.OnServer([this] { return h_.host().calls; }); };
  auto cpu = [this](const std::string& id) {
    return h_.OnServer([this, id] {
      auto it = h_.host().cpu_limits.find(id);
      return it == h_.host().cpu_limits.end() ? std::string("none")
                                              : fmt::format("{}/{}", it->second.weight, it->second.max_millis);
    });
  };
  // Defaults: shown as in force, and no cgroup write (a new QEMU's group has them already).
  std::string plain = Create();
  auto sb = Body(h_.Call(verb::get, "/v1/sandboxes/" + plain));
  EXPECT_EQ(sb["limits"], (json{{"cpu_weight", 100}, {"cpu_max", 2.0}, {"exec_pids_max", 1024}, {"exec_memory_mib", 1024}, {"exec_disk_mib", 512}}))
      << sb.dump();
  EXPECT_EQ(cpu(plain), "none");
  std::string same = Create({{"limits", {{"cpu_weight", 100}, {"cpu_max", 2}}}});
  EXPECT_EQ(cpu(same), "none") << "the defaults, spelt out, change nothing";
  // Given: in force before the answer, and on record.
  std::string capped = Create({{"limits", {{"cpu_weight", 10}, {"cpu_max", 0.5}}}});
  EXPECT_EQ(cpu(capped), "10/500");
  sb = Body(h_.Call(verb::get, "/v1/sandboxes/" + capped));
  EXPECT_EQ(sb["limits"], (json{{"cpu_weight", 10}, {"cpu_max", 0.5}, {"exec_pids_max", 1024}, {"exec_memory_mib", 1024}, {"exec_disk_mib", 512}}))
      << sb.dump();
  // Changed live: a field not given keeps its value; paused too.
  auto r = h_.Call(verb::patch, "/v1/sandboxes/" + capped, R"({"limits": {"cpu_max": 1.25}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["limits"], (json{{"cpu_weight", 10}, {"cpu_max", 1.25}, {"exec_pids_max", 1024}, {"exec_memory_mib", 1024}, {"exec_disk_mib", 512}}));
  EXPECT_EQ(cpu(capped), "10/1250");
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + capped + "/pause").status, 200u);
  r = h_.Call(verb::patch, "/v1/sandboxes/" + capped, R"({"limits": {"cpu_weight": 2500}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(cpu(capped), "2500/1250");
  // Wrong values: 400 naming the field, nothing written.
  size_t before = calls().size();
  for (const char* bad : {R"({"limits": {"cpu_weight": 0}})", R"({"limits": {"cpu_weight": 10001}})",
                          R"({"limits": {"cpu_max": 0.001}})", R"({"limits": {"cpu_max": 3}})",
                          R"({"limits": {"cpu_max": "1"}})", R"({"limits": {"memory": 1}})", R"({"limits": 5})",
                          R"({"limits": {"exec_pids_max": 15}})", R"({"limits": {"exec_pids_max": 4097}})",
                          R"({"limits": {"exec_memory_mib": 63}})", R"({"limits": {"exec_memory_mib": 2049}})",
                          R"({"limits": {"exec_memory_mib": 1.5}})", R"({"limits": {"exec_disk_mib": 15}})",
                          R"({"limits": {"exec_disk_mib": 1048577}})", R"({"limits": {"exec_disk_mib": "64"}})"}) {
    for (std::string target : {std::string("/v1/sandboxes"), "/v1/sandboxes/" + plain}) {
      r = h_.Call(target == "/v1/sandboxes" ? verb::post : verb::patch, target, bad);
      EXPECT_EQ(r.status, 400u) << bad << " " << r.body;
      EXPECT_EQ(Code(r), "invalid_request") << bad;
      EXPECT_NE(r.body.find("limits"), std::string::npos) << r.body;
    }
  }
  EXPECT_EQ(calls().size(), before) << "refused input reaches no VM";
  // A cgroup that cannot be written: the create fails and leaves no VM; a patch changes nothing.
  size_t alive = h_.OnServer([this] { return h_.host().alive(); });
  h_.OnServer([this] {
    h_.host().fail_next_limits = VmError{VmError::Code::kQemu, "cpu limits: write cpu.shares: No such file"};
    return 0;
  });
  r = h_.Call(verb::post, "/v1/sandboxes", R"({"limits": {"cpu_weight": 50}})");
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_EQ(h_.OnServer([this] { return h_.host().alive(); }), alive);
  h_.OnServer([this] {
    h_.host().fail_next_limits = VmError{VmError::Code::kQemu, "cpu limits: write cpu.shares: No such file"};
    return 0;
  });
  r = h_.Call(verb::patch, "/v1/sandboxes/" + capped, R"({"limits": {"cpu_weight": 7}, "timeout_s": 9})");
  EXPECT_EQ(r.status, 500u) << r.body;
  sb = Body(h_.Call(verb::get, "/v1/sandboxes/" + capped));
  EXPECT_EQ(sb["limits"]["cpu_weight"], 2500);
  EXPECT_NE(sb["timeout_s"], 9);
  ASSERT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + capped).status, 204u);
  EXPECT_EQ(h_.Call(verb::patch, "/v1/sandboxes/" + capped, R"({"limits": {"cpu_weight": 7}})").status, 409u);
}

TEST_F(ApiRoutesTest, ExecLimitsAreSetInTheGuestAtCreateAndByPatch) {
  auto set = [this](const std::string& id) {
    return h_.OnServer([this, id] {
      std::vector<std::string> out;
      for (const auto& l : h_.host().agents.at(id)->limits)
        out.push_back(fmt::format("{}/{}/{}", l.exec_pids_max, l.exec_memory_bytes >> 20, l.exec_disk_bytes >> 20));
      return out;
    });
  };
  // The guest's defaults need no call.
  std::string plain = Create({{"limits", {{"exec_pids_max", 1024}, {"exec_memory_mib", 1024}, {"exec_disk_mib", 512}}}});
  EXPECT_TRUE(set(plain).empty());
  // Given at create: in the guest before the answer.
  std::string small = Create({{"limits", {{"exec_pids_max", 64}, {"exec_memory_mib", 256}}}});
  EXPECT_EQ(set(small), (std::vector<std::string>{"64/256/0"})) << "the disk limit is sent only when it changes";
  auto sb = Body(h_.Call(verb::get, "/v1/sandboxes/" + small));
  EXPECT_EQ(sb["limits"]["exec_pids_max"], 64);
  EXPECT_EQ(sb["limits"]["exec_memory_mib"], 256);
  // PATCH: the guest's values with the one changed; a CPU-only patch does not call the guest.
  auto r = h_.Call(verb::patch, "/v1/sandboxes/" + small, R"({"limits": {"exec_memory_mib": 512}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["limits"]["exec_memory_mib"], 512);
  r = h_.Call(verb::patch, "/v1/sandboxes/" + small, R"({"limits": {"cpu_weight": 20}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(set(small), (std::vector<std::string>{"64/256/0", "64/512/0"}));
  r = h_.Call(verb::patch, "/v1/sandboxes/" + small, R"({"limits": {"exec_disk_mib": 64}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["limits"]["exec_disk_mib"], 64);
  r = h_.Call(verb::patch, "/v1/sandboxes/" + small, R"({"limits": {"exec_disk_mib": 64, "exec_pids_max": 65}})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(set(small), (std::vector<std::string>{"64/256/0", "64/512/0", "64/512/64", "65/512/0"}));
  std::string disk = Create({{"limits", {{"exec_disk_mib", 100}}}});
  EXPECT_EQ(set(disk), (std::vector<std::string>{"1024/1024/100"}));
  // Paused: its guest cannot take them (409); CPU limits still can.
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + small + "/pause").status, 200u);
  r = h_.Call(verb::patch, "/v1/sandboxes/" + small, R"({"limits": {"exec_pids_max": 100}})");
  EXPECT_EQ(r.status, 409u) << r.body;
  EXPECT_EQ(Code(r), "invalid_state");
  EXPECT_EQ(h_.Call(verb::patch, "/v1/sandboxes/" + small, R"({"limits": {"cpu_weight": 30}})").status, 200u);
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + small + "/resume").status, 200u);
  // The guest refuses: the patch answers its error and nothing is recorded.
  h_.OnServer([this, small] {
    h_.host().agents.at(small)->limits_error =
        vmhost::AgentError{vmhost::AgentError::Code::kGuest, "/sys/fs/cgroup/user/exec/pids.max: Permission denied"};
    return 0;
  });
  r = h_.Call(verb::patch, "/v1/sandboxes/" + small, R"({"limits": {"exec_pids_max": 100, "cpu_weight": 77}})");
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_NE(r.body.find("Permission denied"), std::string::npos) << r.body;
  auto after = Body(h_.Call(verb::get, "/v1/sandboxes/" + small))["limits"];
  EXPECT_EQ(after["exec_pids_max"], 65);
  EXPECT_EQ(after["cpu_weight"], 30);
  EXPECT_EQ(h_.OnServer([this, small] { return h_.host().cpu_limits.at(small).weight; }), 30u)
      << "the CPU limit written before the guest refused was put back";
  // At create: the sandbox is destroyed and the create fails.
  size_t alive = h_.OnServer([this] { return h_.host().alive(); });
  h_.OnServer([this] {
    h_.host().on_agent = [](vmhost::testing::FakeGuestAgent& a) {
      a.limits_error = vmhost::AgentError{vmhost::AgentError::Code::kGuest, "no exec cgroup"};
    };
    return 0;
  });
  r = h_.Call(verb::post, "/v1/sandboxes", R"({"limits": {"exec_pids_max": 100}})");
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_NE(r.body.find("exec limits"), std::string::npos) << r.body;
  EXPECT_EQ(h_.OnServer([this] { return h_.host().alive(); }), alive);
}

TEST_F(ApiRoutesTest, TimeoutsFollowTheClock) {
  std::string paused = Create({{"timeout_s", 60}});
  std::string stopped = Create({{"timeout_s", 60}, {"on_timeout", "stop"}});
  std::string later = Create({{"timeout_s", 600}});
  h_.clock().Advance(std::chrono::seconds(59));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));  // a tick or two of the timeout clock
  EXPECT_EQ(State(paused), "running");
  h_.clock().Advance(std::chrono::seconds(2));
  EXPECT_TRUE(WaitState(paused, "paused"));
  EXPECT_TRUE(WaitState(stopped, "stopped"));
  EXPECT_EQ(State(later), "running");
  // Resuming starts the countdown again, from the clock's now.
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + paused + "/resume").status, 200u);
  h_.clock().Advance(std::chrono::seconds(61));
  EXPECT_TRUE(WaitState(paused, "paused"));
  auto events = Body(h_.Call(verb::get, "/v1/sandboxes/" + stopped + "/events"))["events"];
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["lifecycle"]["reason"], "timeout");
}

TEST_F(ApiRoutesTest, AVmThatExitsTurnsItsSandboxFailed) {
  std::string id = Create();
  h_.OnServer([&] {
    h_.host().Exit(id, "QEMU exited with status 1");
    return 0;
  });
  auto sb = Body(h_.Call(verb::get, "/v1/sandboxes/" + id));
  EXPECT_EQ(sb["state"], "failed");
  EXPECT_EQ(sb["failure"], "QEMU exited with status 1");
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause").status, 409u);
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  EXPECT_EQ(State(id), "stopped");
}

TEST_F(ApiRoutesTest, TokensAreScopedRevocableAndExpireOnTheClock) {
  std::string id = Create(), other = Create();
  std::string view = Token(id, "view", 60);
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id, "", view).status, 200u);
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + other, "", view).status, 403u);
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause", "", view).status, 403u) << "view cannot control";
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id, "", view).status, 403u);
  std::string control = Token(id, "control");
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause", "", control).status, 200u);
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/resume", "", control).status, 200u);
  auto list = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/tokens"))["tokens"];
  ASSERT_EQ(list.size(), 2u);
  std::string control_id = list[1]["id"];
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/tokens/" + control_id).status, 204u);
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/tokens/" + control_id).status, 204u) << "revoked already";
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id, "", control).status, 401u) << "revoked";
  h_.clock().Advance(std::chrono::seconds(61));
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id, "", view).status, 401u) << "expired";
  EXPECT_EQ(Code(h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "root"})")), "invalid_request");
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/sb-0000000000000000/tokens", R"({"scope": "view"})").status, 404u);
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "view"})").status, 409u);
}

TEST_F(ApiRoutesTest, KeysCanBeMadeListedAndRevokedButNotTheLast) {
  auto r = h_.Call(verb::post, "/v1/keys", R"({"name": "ci"})");
  ASSERT_EQ(r.status, 201u) << r.body;
  std::string second = Body(r)["key"], second_id = Body(r)["id"];
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/keys"))["keys"].size(), 2u);
  EXPECT_EQ(h_.Call(verb::post, "/v1/keys", "{}").status, 400u);
  auto keys = Body(h_.Call(verb::get, "/v1/keys"))["keys"];
  std::string first_id = keys[0]["id"] == second_id ? keys[1]["id"] : keys[0]["id"];
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/keys/" + first_id, "", second).status, 204u);
  EXPECT_EQ(h_.Call(verb::get, "/v1/keys").status, 401u) << "the revoked key";
  r = h_.Call(verb::delete_, "/v1/keys/" + second_id, "", second);
  EXPECT_EQ(r.status, 409u);
  EXPECT_EQ(Code(r), "last_key");
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/keys/key_none", "", second).status, 404u);
}

TEST_F(ApiRoutesTest, EgressPolicyIsReadAndReplaced) {
  std::string id = Create({{"egress", {{"allow", {"example.com"}}}}});
  auto p = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/egress"));
  EXPECT_EQ(p["default"], "deny");
  EXPECT_EQ(p["allow"].size(), 1u);
  auto r = h_.Call(verb::put, "/v1/sandboxes/" + id + "/egress", R"({"allow": ["*.example.org"]})");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["allow"][0], "*.example.org");
  EXPECT_EQ(h_.Call(verb::put, "/v1/sandboxes/" + id + "/egress", R"({"allow": 5})").status, 400u);
  std::string control = Token(id, "control");
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id + "/egress", "", control).status, 200u);
  EXPECT_EQ(h_.Call(verb::put, "/v1/sandboxes/" + id + "/egress", "{}", control).status, 403u);
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/sb-0000000000000000/egress").status, 404u);
  EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  EXPECT_EQ(h_.Call(verb::put, "/v1/sandboxes/" + id + "/egress", "{}").status, 409u);
}

TEST_F(ApiRoutesTest, GuestRoutesCheckInputAndState) {
  std::string id = Create();
  std::string base = "/v1/sandboxes/" + id;
  EXPECT_EQ(h_.Call(verb::post, base + "/exec", "{}").status, 400u);
  EXPECT_EQ(h_.Call(verb::post, base + "/exec", R"({"argv": ["a"], "shell": "b"})").status, 400u);
  EXPECT_EQ(h_.Call(verb::post, base + "/exec", R"({"shell": "true", "stdin_b64": "%%%"})").status, 400u);
  h_.OnServer([&] { return h_.host().agents.erase(id); });
  auto r = h_.Call(verb::post, base + "/exec", R"({"shell": "true"})");
  EXPECT_EQ(r.status, 502u) << "the sandbox has no guest agent now: " << r.body;
  EXPECT_EQ(Code(r), "guest_error");
  EXPECT_EQ(Code(h_.Call(verb::get, base + "/files?path=relative")), "invalid_path");
  EXPECT_EQ(Code(h_.Call(verb::get, base + "/files")), "invalid_request");
  EXPECT_EQ(Code(h_.Call(verb::get, base + "/files?path=/a/../b")), "invalid_path");
  EXPECT_EQ(h_.Call(verb::put, base + "/clipboard", R"({"text": 5})").status, 400u);
  EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/sb-0000000000000000/exec", R"({"shell": "true"})").status, 404u);
  std::string view = Token(id, "view");
  EXPECT_EQ(h_.Call(verb::post, base + "/exec", R"({"shell": "true"})", view).status, 403u);
}

TEST_F(ApiRoutesTest, EventsTellTheLifecycleInOrder) {
  std::string id = Create();
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause").status, 200u);
  ASSERT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  auto events = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events"))["events"];
  std::vector<std::string> states;
  for (const auto& e : events)
    if (e.contains("lifecycle")) states.push_back(e["lifecycle"]["to_state"]);
  EXPECT_EQ(states, (std::vector<std::string>{"running", "paused", "stopped"}));
  EXPECT_EQ(events[0]["actor"]["kind"], "api_key");
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events?since=x").status, 400u);
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events?limit=0").status, 400u);
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/sb-0000000000000000/events").status, 404u);
}

class ApiLimitsTest : public ApiRoutesTest {
 protected:
  ApiLimitsTest()
      : ApiRoutesTest([](DaemonConfig& c) {
          c.max_sandboxes = 2;
          c.creates_per_second = 2;
        }) {}
};

TEST_F(ApiLimitsTest, CreatesAreRateLimitedOnTheClockAndCapped) {
  Create();
  Create();
  auto r = h_.Call(verb::post, "/v1/sandboxes", "{}");
  EXPECT_EQ(r.status, 429u);
  EXPECT_EQ(Code(r), "rate_limited");
  EXPECT_FALSE(r.header("Retry-After").empty());
  h_.clock().Advance(std::chrono::seconds(1));
  r = h_.Call(verb::post, "/v1/sandboxes", "{}");
  EXPECT_EQ(r.status, 429u);
  EXPECT_EQ(Code(r), "sandbox_limit") << "two are alive";
}

// A deskboxd started after another one stopped: running sandboxes whose VM is still there are
// adopted, the others and those caught creating become failed.
class ApiRecoveryTest : public ::testing::Test {};

TEST_F(ApiRecoveryTest, AdoptsWhatIsStillThereAndFailsTheRest) {
  ServiceHarness h(TestName());
  for (auto [id, state] : {std::pair{"sb-00000000000000a1", SandboxState::kRunning},
                           std::pair{"sb-00000000000000a2", SandboxState::kRunning},
                           std::pair{"sb-00000000000000a3", SandboxState::kCreating}}) {
    SandboxRecord r;
    r.id = id;
    r.state = state;
    r.template_name = "desktop@test";
    r.timeout_s = 600;
    r.created_at_ms = h.clock().NowMs();
    ASSERT_TRUE(h.store().PutSandbox(r));
  }
  h.host().adopt = {"sb-00000000000000a1"};
  h.Start();
  auto get = [&](const char* id) { return Body(h.Call(verb::get, std::string("/v1/sandboxes/") + id)); };
  EXPECT_EQ(get("sb-00000000000000a1")["state"], "running");
  EXPECT_TRUE(get("sb-00000000000000a1")["expires_at"].is_string()) << "its countdown runs again";
  EXPECT_EQ(get("sb-00000000000000a2")["state"], "failed");
  EXPECT_NE(get("sb-00000000000000a2")["failure"].get<std::string>().find("lost while deskboxd was down"),
            std::string::npos);
  EXPECT_EQ(get("sb-00000000000000a3")["state"], "failed");
  auto events = Body(h.Call(verb::get, "/v1/sandboxes/sb-00000000000000a1/events"))["events"];
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back()["lifecycle"]["reason"], "restart_recovery");
}

}  // namespace
}  // namespace deskbox::api
