// The guest routes (exec, files, clipboard) and a create's resize, against a fake guest agent:
// what each route asks of the agent, what it answers, and how the agent's failures map to HTTP.
#include <gtest/gtest.h>

#include "api_routes_fixture.h"
#include "common/base64.h"

namespace deskbox::api {
namespace {

using vmhost::AgentError;
using vmhost::ExecResult;
using vmhost::testing::FakeGuestAgent;

class GuestRoutesTest : public ApiRoutesTest {
 protected:
  // The fake agent of `id`, to script or read on the server's thread.
  template <typename F>
  auto OnAgent(const std::string& id, F f) {
    return h_.OnServer([&] { return f(*h_.host().agents.at(id)); });
  }
};

TEST_F(GuestRoutesTest, ExecPassesTheCommandAndAnswersItsResult) {
  std::string id = Create();
  OnAgent(id, [](FakeGuestAgent& a) {
    a.on_exec = [](const vmhost::ExecSpec&) -> std::expected<ExecResult, AgentError> {
      ExecResult r;
      r.exit_code = 3;
      r.stdout_data = std::string("out\0\xff", 5);
      r.stderr_data = "err";
      r.truncated = true;
      r.duration = std::chrono::milliseconds(42);
      return r;
    };
    return 0;
  });
  auto r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/exec",
                   json{{"argv", {"/bin/cat", "-"}},
                        {"env", {{"A", "1"}}},
                        {"cwd", "/tmp"},
                        {"stdin_b64", Base64Encode("in")},
                        {"timeout_s", 7},
                        {"max_output_bytes", 1000},
                        {"encoding", "base64"}}
                       .dump());
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = Body(r);
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(Base64Decode(j["stdout"].get<std::string>()), std::string("out\0\xff", 5));
  EXPECT_EQ(j["stderr"], Base64Encode("err"));
  EXPECT_EQ(j["encoding"], "base64");
  EXPECT_EQ(j["truncated"], true);
  EXPECT_EQ(j["duration_ms"], 42);
  auto spec = OnAgent(id, [](FakeGuestAgent& a) { return a.execs.at(0); });
  EXPECT_EQ(spec.argv, (std::vector<std::string>{"/bin/cat", "-"}));
  EXPECT_EQ(spec.env, (std::map<std::string, std::string>{{"A", "1"}}));
  EXPECT_EQ(spec.cwd, "/tmp");
  EXPECT_EQ(spec.stdin_data, "in");
  EXPECT_EQ(spec.timeout, std::chrono::seconds(7));
  EXPECT_EQ(spec.max_output_bytes, 1000u);
  // The timeline records the command and its outcome, not its output.
  auto events = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events"))["events"];
  json exec;
  for (const auto& e : events)
    if (e.contains("exec")) exec = e["exec"];
  EXPECT_EQ(exec["argv"], json({"/bin/cat", "-"}));
  EXPECT_EQ(exec["exit_code"], 3);
  EXPECT_EQ(exec["stdout_bytes"], 5);
}

TEST_F(GuestRoutesTest, ExecFailuresOfTheAgentMapToTheirAnswers) {
  std::string id = Create();
  std::string target = "/v1/sandboxes/" + id + "/exec";
  auto fail_with = [&](AgentError e) {
    OnAgent(id, [e](FakeGuestAgent& a) {
      a.on_exec = [e](const vmhost::ExecSpec&) -> std::expected<ExecResult, AgentError> {
        return std::unexpected(e);
      };
      return 0;
    });
  };
  fail_with({AgentError::Code::kTimeout, "no answer in 75 s"});
  auto r = h_.Call(verb::post, target, R"({"shell": "sleep 60"})");
  EXPECT_EQ(r.status, 504u) << r.body;
  EXPECT_EQ(Code(r), "guest_timeout");
  fail_with({AgentError::Code::kClosed, "the agent channel closed"});
  r = h_.Call(verb::post, target, R"({"shell": "true"})");
  EXPECT_EQ(r.status, 502u) << r.body;
  EXPECT_EQ(Code(r), "guest_error");
  EXPECT_NE(r.body.find("the agent channel closed"), std::string::npos) << r.body;
  // A guest refusal of a command is the guest's error, not a bad path.
  fail_with({AgentError::Code::kGuest, "no such file", agent::v1::Error::NOT_FOUND});
  EXPECT_EQ(Code(h_.Call(verb::post, target, R"({"argv": ["/nope"]})")), "guest_error");
}

TEST_F(GuestRoutesTest, FilesGoUpAndComeBackWhole) {
  std::string id = Create();
  std::string base = "/v1/sandboxes/" + id + "/files?path=";
  // Larger than one agent chunk, and not a multiple of it.
  std::string data(vmhost::AgentGuest::kFileChunkBytes * 2 + 123, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 % 251);
  auto up = h_.Call(verb::put, base + "/home/user/a.bin&mode=0600&parents=1", data);
  ASSERT_EQ(up.status, 200u) << up.body;
  EXPECT_EQ(Body(up)["bytes"], data.size());
  EXPECT_EQ(Body(up)["path"], "/home/user/a.bin");
  auto write = OnAgent(id, [](FakeGuestAgent& a) { return a.writes.at(0); });
  EXPECT_EQ(write.spec.mode, 0600u);
  EXPECT_TRUE(write.spec.create_parents);
  EXPECT_TRUE(write.finished);
  EXPECT_EQ(write.data, data);
  OnAgent(id, [](FakeGuestAgent& a) { return a.read_chunk_bytes = 1000; });
  auto down = h_.Call(verb::get, base + "/home/user/a.bin");
  ASSERT_EQ(down.status, 200u) << down.body.substr(0, 200);
  EXPECT_EQ(down.header("X-File-Size"), std::to_string(data.size()));
  EXPECT_EQ(down.body, data);
  // An empty file is a file.
  ASSERT_EQ(h_.Call(verb::put, base + "/tmp/empty", "").status, 200u);
  auto empty = h_.Call(verb::get, base + "/tmp/empty");
  EXPECT_EQ(empty.status, 200u);
  EXPECT_EQ(empty.body, "");
}

TEST_F(GuestRoutesTest, FileRefusalsOfTheGuestAreAboutThePath) {
  std::string id = Create();
  std::string base = "/v1/sandboxes/" + id + "/files?path=";
  auto r = h_.Call(verb::get, base + "/nope");
  EXPECT_EQ(r.status, 404u) << r.body;
  EXPECT_EQ(Code(r), "file_not_found");
  OnAgent(id, [](FakeGuestAgent& a) {
    a.write_error = AgentError{AgentError::Code::kGuest, "is a directory",
                               agent::v1::Error::INVALID_ARGUMENT};
    a.read_error = AgentError{AgentError::Code::kGuest, "larger than allowed",
                              agent::v1::Error::TOO_LARGE};
    return 0;
  });
  r = h_.Call(verb::put, base + "/etc", "x");
  EXPECT_EQ(r.status, 400u) << r.body;
  EXPECT_EQ(Code(r), "invalid_path");
  EXPECT_FALSE(OnAgent(id, [](FakeGuestAgent& a) { return a.files.count("/etc") > 0; }));
  r = h_.Call(verb::get, base + "/var/big");
  EXPECT_EQ(r.status, 413u) << r.body;
  EXPECT_EQ(Code(r), "payload_too_large");
  // The query is checked before the agent is asked.
  EXPECT_EQ(Code(h_.Call(verb::put, base + "/a&mode=999", "x")), "invalid_request");
  EXPECT_EQ(Code(h_.Call(verb::put, base + "/a&parents=maybe", "x")), "invalid_request");
  EXPECT_EQ(Code(h_.Call(verb::put, base + "/a&colour=red", "x")), "invalid_request");
  EXPECT_EQ(OnAgent(id, [](FakeGuestAgent& a) { return a.writes.size(); }), 1u);
}

TEST_F(GuestRoutesTest, ClipboardRoundTripsAndFailsCleanly) {
  std::string id = Create();
  std::string target = "/v1/sandboxes/" + id + "/clipboard";
  EXPECT_EQ(h_.Call(verb::put, target, R"({"text": "héllo 世界"})").status, 204u);
  auto r = h_.Call(verb::get, target);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["text"], "héllo 世界");
  EXPECT_EQ(h_.Call(verb::put, target, "{}").status, 400u);
  OnAgent(id, [](FakeGuestAgent& a) {
    a.clipboard_error = AgentError{AgentError::Code::kTimeout, "xclip hung"};
    return 0;
  });
  EXPECT_EQ(Code(h_.Call(verb::get, target)), "guest_timeout");
  EXPECT_EQ(Code(h_.Call(verb::put, target, R"({"text": "x"})")), "guest_timeout");
  // A paused sandbox has no guest to ask.
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause").status, 200u);
  EXPECT_EQ(h_.Call(verb::get, target).status, 409u);
}

TEST_F(GuestRoutesTest, CreateWithAResolutionResizesTheDisplay) {
  std::string id = Create({{"resolution", {{"width", 1024}, {"height", 768}}}});
  auto resizes = OnAgent(id, [](FakeGuestAgent& a) { return a.resizes; });
  EXPECT_EQ(resizes, (std::vector<std::pair<uint32_t, uint32_t>>{{1024, 768}}));
  // The template's own size needs no resize.
  std::string same = Create({{"resolution", {{"width", 1280}, {"height", 800}}}});
  EXPECT_TRUE(OnAgent(same, [](FakeGuestAgent& a) { return a.resizes.empty(); }));
}

TEST_F(GuestRoutesTest, ASizeTheDisplayRefusesEndsTheCreate) {
  // The next sandbox's agent refuses every size (the fake makes agents at create).
  h_.OnServer([&] {
    h_.host().on_agent = [](FakeGuestAgent& a) {
      a.resize_error = AgentError{AgentError::Code::kGuest, "the display refused 2000x1000",
                                  agent::v1::Error::INVALID_ARGUMENT};
    };
    return 0;
  });
  auto r = h_.Call(verb::post, "/v1/sandboxes",
                   json{{"resolution", {{"width", 2000}, {"height", 1000}}}}.dump());
  EXPECT_EQ(r.status, 422u) << r.body;
  EXPECT_EQ(Code(r), "unsupported_resolution");
  EXPECT_NE(r.body.find("refused 2000x1000"), std::string::npos) << r.body;
  // Nothing is left of it.
  EXPECT_EQ(Body(h_.Call(verb::get, "/v1/sandboxes"))["sandboxes"].size(), 0u);
  EXPECT_TRUE(h_.OnServer([&] { return h_.host().Stats().sandboxes == 0; }));
}

}  // namespace
}  // namespace deskbox::api
