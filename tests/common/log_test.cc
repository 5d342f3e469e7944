// FormatLine: the text line people read and the JSON line collectors parse, whatever bytes a
// message holds.
#include "common/log.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace deskbox::log {
namespace {

using nlohmann::json;

// 2026-12-04T09:36:05.123456Z
constexpr int64_t kAt = 1796376965123456;

TEST(LogTest, TextLinesAreTimeLevelComponentAndMessage) {
  EXPECT_EQ(FormatLine(Format::kText, kAt, Level::kWarn, "vmhost", "slot 3: restore failed"),
            "09:36:05.123 WARN vmhost: slot 3: restore failed\n");
}

TEST(LogTest, JsonLinesCarryTheDateAndTheIdsTheMessageNames) {
  std::string line = FormatLine(Format::kJson, kAt, Level::kInfo, "api",
                                "req_0123456789abcdef POST /v1/sandboxes/{id}/exec 200 sandbox sb-fedcba9876543210");
  ASSERT_TRUE(line.ends_with("}\n"));
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  json j = json::parse(line);
  EXPECT_EQ(j["time"], "2026-12-04T09:36:05.123Z");
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["component"], "api");
  EXPECT_EQ(j["message"], "req_0123456789abcdef POST /v1/sandboxes/{id}/exec 200 sandbox sb-fedcba9876543210");
  EXPECT_EQ(j["request_id"], "req_0123456789abcdef");
  EXPECT_EQ(j["sandbox_id"], "sb-fedcba9876543210");
}

TEST(LogTest, OnlyWholeIdsAreTakenForIds) {
  json j = json::parse(FormatLine(Format::kJson, kAt, Level::kError, "api",
                                  "xsb-0123456789abcdef, sb-0123, sb-0123456789abcdef0, sb-0123456789ABCDEF"));
  EXPECT_FALSE(j.contains("sandbox_id")) << j.dump();
  EXPECT_FALSE(j.contains("request_id"));
  EXPECT_EQ(j["level"], "error");
}

TEST(LogTest, AnyBytesInAMessageMakeAJsonLineThatParses) {
  std::string nasty = "quote \" backslash \\ newline \n tab \t nul ";
  nasty += '\0';
  nasty += " bad utf-8 \xff\xc0\xaf \xed\xa0\x80 cut \xe4\xb8 ok \xc3\xa9 \xf0\x9f\x99\x82";
  std::string line = FormatLine(Format::kJson, kAt, Level::kDebug, "egr\"ess", nasty);
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << "one line";
  json j = json::parse(line);
  std::string m = j["message"];
  EXPECT_TRUE(m.starts_with("quote \" backslash \\ newline \n tab \t nul "));
  EXPECT_TRUE(m.ends_with(" ok \xc3\xa9 \xf0\x9f\x99\x82")) << "valid UTF-8 is kept";
  EXPECT_NE(m.find("bad utf-8 \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"), std::string::npos);
  EXPECT_EQ(j["component"], "egr\"ess");
  EXPECT_EQ(j["level"], "debug");
}

TEST(LogTest, TheFormatIsSetForEveryLineAfter) {
  Format before = GetFormat();
  SetFormat(Format::kJson);
  EXPECT_EQ(GetFormat(), Format::kJson);
  SetFormat(Format::kText);
  EXPECT_EQ(GetFormat(), Format::kText);
  SetFormat(before);
}

}  // namespace
}  // namespace deskbox::log
