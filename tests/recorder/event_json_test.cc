#include "recorder/event_json.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "recorder_test_util.h"

namespace deskbox::recorder {
namespace {

using nlohmann::json;
using testing::AllKinds;

TEST(EventJson, ActionHasTheDocumentedShape) {
  auto e = AllKinds("sb-1")[1];
  e.set_seq(3);
  json expect = json::parse(R"({
    "seq": 3,
    "time": "2024-01-31T12:00:00.123Z",
    "sandbox_id": "sb-1",
    "request_id": "req-1",
    "actor": {"kind": "agent", "id": "key_agent", "remote": "192.0.2.7:40000"},
    "kind": "action",
    "action": {"type": "click", "params": {"x": 10, "y": 20, "button": "left"},
               "frame_seq": 42, "settled": true, "duration_ms": 35}
  })");
  EXPECT_EQ(json::parse(ToJson(e)), expect);
  EXPECT_EQ(EventToJson(e), expect);
  EXPECT_EQ(ToJson(e).rfind(R"({"seq":3,"time":"2024-01-31T12:00:00.123Z",)", 0), 0u) << ToJson(e);
  EXPECT_EQ(ToJson(e).find('\n'), std::string::npos);
}

TEST(EventJson, EveryKindRendersItsFieldsUnderItsName) {
  const std::map<std::string, std::vector<std::string>> fields = {
      {"lifecycle", {"from_state", "to_state", "reason", "detail"}},
      {"action", {"type", "params", "frame_seq", "settled", "duration_ms"}},
      {"viewer_input", {"kind", "dropped", "count"}},
      {"cdp", {"method", "session_id", "notable", "note"}},
      {"egress",
       {"protocol", "name", "address", "port", "allowed", "rule", "reason", "bytes_up",
        "bytes_down", "duration_ms", "query_type", "phase"}},
      {"exec",
       {"argv", "shell", "exit_code", "signal", "duration_ms", "timed_out", "stdout_bytes",
        "stderr_bytes"}},
      {"file", {"direction", "path", "bytes", "ok", "error"}},
      {"recording",
       {"phase", "index", "file", "start", "end", "start_ms", "end_ms", "bytes", "sha256", "width",
        "height", "frames", "truncated", "detail", "dropped_frames"}},
  };
  std::set<std::string> kinds;
  auto events = AllKinds("sb-1");
  events.push_back(testing::RecordingSegmentEvent("sb-1"));
  for (const auto& e : events) {
    json j = json::parse(ToJson(e));
    std::string kind = j.at("kind");
    kinds.insert(kind);
    ASSERT_TRUE(fields.contains(kind)) << kind;
    ASSERT_TRUE(j.contains(kind)) << j.dump();
    EXPECT_EQ(j.size(), 7u) << "seq, time, sandbox_id, request_id, actor, kind, " << kind;
    std::vector<std::string> keys;
    for (const auto& [k, v] : j.at(kind).items()) keys.push_back(k);
    auto want = fields.at(kind);
    std::sort(keys.begin(), keys.end());
    std::sort(want.begin(), want.end());
    EXPECT_EQ(keys, want) << kind;
  }
  EXPECT_EQ(kinds.size(), 8u);
  json exec = json::parse(ToJson(AllKinds("sb-1")[5]));
  EXPECT_EQ(exec["exec"]["argv"], json::array({"ls", "-l"}));
  EXPECT_EQ(exec["exec"]["exit_code"], 2);
  EXPECT_EQ(exec["actor"]["kind"], "api_key");
  json egress = json::parse(ToJson(AllKinds("sb-1")[4]));
  EXPECT_EQ(egress["egress"]["bytes_down"], 54000);
  EXPECT_EQ(egress["actor"]["kind"], "system");
  EXPECT_EQ(json::parse(ToJson(AllKinds("sb-1")[2]))["actor"]["kind"], "human");
  EXPECT_EQ(json::parse(ToJson(AllKinds("sb-1")[3]))["actor"]["kind"], "token");
}

TEST(EventJson, DefaultsAndUnknowns) {
  Event e;
  json j = json::parse(ToJson(e));
  EXPECT_EQ(j["seq"], 0);
  EXPECT_EQ(j["time"], "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(j["kind"], "none");
  EXPECT_FALSE(j.contains("request_id"));
  EXPECT_EQ(j["actor"]["kind"], "system");
  e.mutable_actor()->set_kind(static_cast<v1::Actor::Kind>(42));
  EXPECT_EQ(json::parse(ToJson(e))["actor"]["kind"], "unknown");
}

TEST(EventJson, TimesAreRfc3339UtcWithMilliseconds) {
  EXPECT_EQ(FormatTimeRfc3339(0), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(FormatTimeRfc3339(1'706'702'400'123'456'789), "2024-01-31T12:00:00.123Z");
  EXPECT_EQ(FormatTimeRfc3339(1'706'702'400'999'999'999), "2024-01-31T12:00:00.999Z");
  EXPECT_EQ(FormatTimeRfc3339(-1), "1969-12-31T23:59:59.999Z");
  EXPECT_EQ(FormatTimeRfc3339(951'782'400'000'000'000), "2000-02-29T00:00:00.000Z");
  EXPECT_EQ(FormatTimeRfc3339(INT64_MAX), "2262-04-11T23:47:16.854Z");
}

TEST(EventJson, ParamsAreEmbeddedWhenTheyParseAndKeptRawOtherwise) {
  Event e;
  e.mutable_action()->set_type("key");
  EXPECT_EQ(json::parse(ToJson(e))["action"]["params"], json::object());
  e.mutable_action()->set_params_json("{not json");
  EXPECT_EQ(json::parse(ToJson(e))["action"]["params"], "{not json");
  std::string deep = std::string(100, '[') + std::string(100, ']');
  e.mutable_action()->set_params_json(deep);
  EXPECT_EQ(json::parse(ToJson(e))["action"]["params"], deep);
  std::string ok = std::string(10, '[') + std::string(10, ']');
  e.mutable_action()->set_params_json(ok);
  EXPECT_EQ(json::parse(ToJson(e))["action"]["params"], json::parse(ok));
}

TEST(EventJson, InvalidUtf8StillGivesValidJson) {
  Event e;
  e.set_sandbox_id("sb-1");
  e.mutable_cdp()->set_method("Page.\xff\xfe");
  e.mutable_actor()->set_remote("\xc0\x80");
  std::string out = ToJson(e);
  json j = json::parse(out);  // throws on invalid UTF-8
  EXPECT_EQ(j["cdp"]["method"], "Page.\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_NO_THROW(EventToJson(e).dump());
}

}  // namespace
}  // namespace deskbox::recorder
