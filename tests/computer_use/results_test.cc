// What goes back to the agent loop: Anthropic tool_result blocks and OpenAI computer_call_output
// items, exactly; and the names of the error codes.
#include <gtest/gtest.h>

#include "computer_use/anthropic.h"
#include "computer_use/error.h"
#include "computer_use/openai.h"
#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;

TEST(AnthropicToolResult, WithId) {
  EXPECT_EQ(
      AnthropicToolResult(json::array({{{"type", "text"}, {"text", "hi"}}}), false, "toolu_01"),
      json::parse(R"({"type": "tool_result", "tool_use_id": "toolu_01", "is_error": false,
                            "content": [{"type": "text", "text": "hi"}]})"));
}

TEST(AnthropicToolResult, WithoutIdHasNoIdMember) {
  EXPECT_EQ(AnthropicToolResult(json::array(), true, ""),
            json::parse(R"({"type": "tool_result", "is_error": true, "content": []})"));
}

TEST(AnthropicTextResult, ModelError) {
  EXPECT_EQ(AnthropicTextResult("unknown action 'swipe'", true, "toolu_02"),
            json::parse(R"({"type": "tool_result", "tool_use_id": "toolu_02", "is_error": true,
                            "content": [{"type": "text", "text": "unknown action 'swipe'"}]})"));
}

TEST(AnthropicTextResult, WithoutId) {
  EXPECT_EQ(AnthropicTextResult("done", false, ""),
            json::parse(R"({"type": "tool_result", "is_error": false,
                            "content": [{"type": "text", "text": "done"}]})"));
}

TEST(AnthropicCursorResult, PointerAsText) {
  EXPECT_EQ(AnthropicCursorResult({512, 320}, "toolu_03"),
            json::parse(R"({"type": "tool_result", "tool_use_id": "toolu_03", "is_error": false,
                            "content": [{"type": "text", "text": "X=512,Y=320"}]})"));
  EXPECT_EQ(AnthropicCursorResult({0, 0}, ""),
            json::parse(R"({"type": "tool_result", "is_error": false,
                            "content": [{"type": "text", "text": "X=0,Y=0"}]})"));
}

// The pointer in display pixels, as the handler computes it from the screen pointer.
TEST(AnthropicCursorResult, InDisplayPixels) {
  EXPECT_EQ(AnthropicCursorResult(kScaled.ToDisplay({640, 400}), "")["content"][0]["text"],
            "X=512,Y=320");
}

TEST(AnthropicImageResult, Png) {
  EXPECT_EQ(AnthropicImageResult(ImageFormat::kPng, "iVBORw0KGgo=", "toolu_04"),
            json::parse(R"({"type": "tool_result", "tool_use_id": "toolu_04", "is_error": false,
                            "content": [{"type": "image", "source": {"type": "base64",
                              "media_type": "image/png", "data": "iVBORw0KGgo="}}]})"));
}

TEST(AnthropicImageResult, JpegWithoutId) {
  EXPECT_EQ(AnthropicImageResult(ImageFormat::kJpeg, "/9j/4AAQ", ""),
            json::parse(R"({"type": "tool_result", "is_error": false,
                            "content": [{"type": "image", "source": {"type": "base64",
                              "media_type": "image/jpeg", "data": "/9j/4AAQ"}}]})"));
}

TEST(OpenAiCallOutput, WithCallId) {
  EXPECT_EQ(OpenAiCallOutput(ImageFormat::kPng, "iVBORw0KGgo=", "call_abc"),
            json::parse(R"({"type": "computer_call_output", "call_id": "call_abc",
                            "output": {"type": "computer_screenshot",
                                       "image_url": "data:image/png;base64,iVBORw0KGgo="}})"));
}

TEST(OpenAiCallOutput, JpegWithoutCallId) {
  EXPECT_EQ(OpenAiCallOutput(ImageFormat::kJpeg, "/9j/4AAQ", ""),
            json::parse(R"({"type": "computer_call_output",
                            "output": {"type": "computer_screenshot",
                                       "image_url": "data:image/jpeg;base64,/9j/4AAQ"}})"));
}

TEST(ErrorCodeNames, EveryCode) {
  EXPECT_STREQ(ToString(ErrorCode::kNotAnObject), "not_an_object");
  EXPECT_STREQ(ToString(ErrorCode::kMissingField), "missing_field");
  EXPECT_STREQ(ToString(ErrorCode::kUnknownField), "unknown_field");
  EXPECT_STREQ(ToString(ErrorCode::kWrongType), "wrong_type");
  EXPECT_STREQ(ToString(ErrorCode::kOutOfRange), "out_of_range");
  EXPECT_STREQ(ToString(ErrorCode::kUnknownAction), "unknown_action");
  EXPECT_STREQ(ToString(ErrorCode::kBadCoordinate), "bad_coordinate");
  EXPECT_STREQ(ToString(ErrorCode::kOutsideDisplay), "outside_display");
  EXPECT_STREQ(ToString(ErrorCode::kBadButton), "bad_button");
  EXPECT_STREQ(ToString(ErrorCode::kBadKey), "bad_key");
  EXPECT_STREQ(ToString(ErrorCode::kBadText), "bad_text");
  EXPECT_STREQ(ToString(ErrorCode::kBadScroll), "bad_scroll");
  EXPECT_STREQ(ToString(ErrorCode::kBadDuration), "bad_duration");
  EXPECT_STREQ(ToString(ErrorCode::kBadRegion), "bad_region");
  EXPECT_STREQ(ToString(ErrorCode::kBadPath), "bad_path");
  EXPECT_STREQ(ToString(ErrorCode::kBadDisplay), "bad_display");
  EXPECT_STREQ(ToString(ErrorCode::kBadImageFormat), "bad_image_format");
}

}  // namespace
}  // namespace deskbox::computer_use::test
