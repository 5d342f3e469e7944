// Anthropic tool inputs the model got wrong: each class of mistake, its code, and the message the
// tool_result hands back to the model, word for word.
#include <gtest/gtest.h>

#include <string>

#include "computer_use/anthropic.h"
#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;

class AnthropicError : public ::testing::TestWithParam<Case> {};

TEST_P(AnthropicError, IsRefusedWithItsMessage) {
  EXPECT_EQ(Anthropic(json::parse(GetParam().input), GetParam().display), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Envelope, AnthropicError,
    ::testing::Values(
        Case{"BodyIsAList", R"([{"action": "screenshot"}])",
             "not_an_object: the body must be the tool's input object (or a tool_use block)"},
        Case{"BodyIsAString", R"("screenshot")",
             "not_an_object: the body must be the tool's input object (or a tool_use block)"},
        Case{"ToolUseInputNotAnObject", R"({"type": "tool_use", "id": "t", "input": "x"})",
             "not_an_object: tool_use.input must be an object"},
        Case{"ToolUseWithoutInput", R"({"type": "tool_use", "id": "t"})",
             "not_an_object: tool_use.input must be an object"},
        Case{"ToolUseIdNotAString",
             R"({"type": "tool_use", "id": 7, "input": {"action": "screenshot"}})",
             "wrong_type: tool_use.id must be a string"},
        Case{"MissingAction", R"({"coordinate": [1, 2]})", "missing_field: action is required"},
        Case{"NullAction", R"({"action": null})", "missing_field: action is required"},
        Case{"ActionNotAString", R"({"action": 5})", "wrong_type: action is required"},
        Case{"UnknownMember", R"({"action": "screenshot", "display_width_px": 1024})",
             "unknown_field: unknown parameter 'display_width_px'"},
        Case{"UnknownAction", R"({"action": "swipe"})", "unknown_action: unknown action 'swipe'"},
        // The name is cut to 64 bytes in the message.
        Case{"UnknownActionLongName", R"({"action": ")" + std::string(100, 'z') + R"("})",
             "unknown_action: unknown action '" + std::string(64, 'z') + "'"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Coordinates, AnthropicError,
    ::testing::Values(
        Case{"OnlyX", R"({"action": "left_click", "coordinate": [100]})",
             "bad_coordinate: coordinate must be [x, y] (integers)"},
        Case{"ThreeNumbers", R"({"action": "left_click", "coordinate": [1, 2, 3]})",
             "bad_coordinate: coordinate must be [x, y] (integers)"},
        Case{"Strings", R"({"action": "left_click", "coordinate": ["1", "2"]})",
             "bad_coordinate: coordinate must be [x, y] (integers)"},
        Case{"Floats", R"({"action": "mouse_move", "coordinate": [1.5, 2]})",
             "bad_coordinate: coordinate must be [x, y] (integers)"},
        Case{"Object", R"({"action": "mouse_move", "coordinate": {"x": 1, "y": 2}})",
             "bad_coordinate: coordinate must be [x, y] (integers)"},
        Case{"StartNotAPair",
             R"({"action": "left_click_drag", "start_coordinate": 5, "coordinate": [1, 2]})",
             "bad_coordinate: start_coordinate must be [x, y] (integers)"},
        Case{"NegativeX", R"({"action": "left_click", "coordinate": [-1, 5]})",
             "outside_display: coordinate [-1, 5] is outside the 1280x800 display"},
        Case{"XEqualsWidth", R"({"action": "left_click", "coordinate": [1280, 0]})",
             "outside_display: coordinate [1280, 0] is outside the 1280x800 display"},
        Case{"YEqualsHeight", R"({"action": "scroll", "coordinate": [0, 800],
                                  "scroll_direction": "up"})",
             "outside_display: coordinate [0, 800] is outside the 1280x800 display"},
        // Off the declared display, though on the screen.
        Case{"OutsideDeclaredDisplay", R"({"action": "mouse_move", "coordinate": [1024, 0]})",
             "outside_display: coordinate [1024, 0] is outside the 1024x640 display", kScaled},
        Case{"StartOutside",
             R"({"action": "left_click_drag", "start_coordinate": [0, 640],
                 "coordinate": [1, 2]})",
             "outside_display: start_coordinate [0, 640] is outside the 1024x640 display", kScaled},
        Case{"MouseMoveWithout", R"({"action": "mouse_move"})",
             "missing_field: mouse_move needs coordinate"},
        Case{"DragWithoutStart", R"({"action": "left_click_drag", "coordinate": [1, 2]})",
             "missing_field: left_click_drag needs start_coordinate"},
        Case{"DragWithoutEnd", R"({"action": "left_click_drag", "start_coordinate": [1, 2]})",
             "missing_field: left_click_drag needs coordinate"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Keys, AnthropicError,
    ::testing::Values(
        Case{"KeyWithoutText", R"({"action": "key"})", "missing_field: key needs text"},
        Case{"HoldKeyWithoutText", R"({"action": "hold_key", "duration": 1})",
             "missing_field: hold_key needs text"},
        Case{"KeyEmptyText", R"({"action": "key", "text": ""})", "bad_key: key needs text"},
        Case{"KeyTextNotAString", R"({"action": "key", "text": 13})", "bad_key: key needs text"},
        Case{"UnknownKey", R"({"action": "key", "text": "Retrun"})",
             "bad_key: unknown key 'Retrun'"},
        Case{"UnknownKeyInSequence", R"({"action": "key", "text": "ctrl+a Dlete"})",
             "bad_key: unknown key 'Dlete'"},
        Case{"ComboEndsWithPlus", R"({"action": "key", "text": "ctrl+"})",
             "bad_key: 'ctrl+' ends with '+'"},
        Case{"ComboOfNineKeys", R"({"action": "key", "text": "a+b+c+d+e+f+g+h+i"})",
             "bad_key: 'a+b+c+d+e+f+g+h+i' has more than 8 keys"},
        // hold_key takes one combo, not a sequence.
        Case{"HoldKeySequence", R"({"action": "hold_key", "text": "a b"})",
             "bad_key: unknown key 'a b'"},
        Case{"ClickUnknownModifier",
             R"({"action": "left_click", "coordinate": [1, 2], "text": "hyperx"})",
             "bad_key: text (modifier keys): unknown key 'hyperx'"},
        Case{"ScrollModifierNotAString",
             R"({"action": "scroll", "scroll_direction": "up", "text": ["ctrl"]})",
             "bad_key: text (modifier keys) must be a string"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    TextScrollDurationRegion, AnthropicError,
    ::testing::Values(
        Case{"TypeWithoutText", R"({"action": "type"})", "missing_field: type needs text"},
        Case{"TypeTextNotAString", R"({"action": "type", "text": ["a"]})",
             "bad_text: type needs text"},
        Case{"TypeControlCharacter", R"({"action": "type", "text": "ding\u0007"})",
             "bad_text: text contains the control character U+0007 (use a key action)"},
        Case{"TypeDelete", R"({"action": "type", "text": "\u007f"})",
             "bad_text: text contains the control character U+007F (use a key action)"},
        Case{"ScrollWithoutDirection", R"({"action": "scroll", "coordinate": [1, 2]})",
             "missing_field: scroll needs scroll_direction"},
        Case{"ScrollDirectionNotAString", R"({"action": "scroll", "scroll_direction": 1})",
             "bad_scroll: scroll needs scroll_direction"},
        Case{"ScrollBadDirection", R"({"action": "scroll", "scroll_direction": "sideways"})",
             "bad_scroll: scroll_direction must be up, down, left or right"},
        Case{"ScrollZero", R"({"action": "scroll", "scroll_direction": "up", "scroll_amount": 0})",
             "bad_scroll: scroll_amount must be between 1 and 100"},
        Case{"ScrollNegative",
             R"({"action": "scroll", "scroll_direction": "up", "scroll_amount": -3})",
             "bad_scroll: scroll_amount must be between 1 and 100"},
        Case{"ScrollTooFar",
             R"({"action": "scroll", "scroll_direction": "up", "scroll_amount": 101})",
             "bad_scroll: scroll_amount must be between 1 and 100"},
        Case{"ScrollAmountFloat",
             R"({"action": "scroll", "scroll_direction": "up", "scroll_amount": 2.5})",
             "bad_scroll: scroll_amount must be an integer"},
        Case{"ScrollAmountString",
             R"({"action": "scroll", "scroll_direction": "up", "scroll_amount": "3"})",
             "bad_scroll: scroll_amount must be an integer"},
        Case{"WaitNegative", R"({"action": "wait", "duration": -1})",
             "bad_duration: duration must be between 0 and 30 seconds"},
        Case{"WaitTooLong", R"({"action": "wait", "duration": 30.001})",
             "bad_duration: duration must be between 0 and 30 seconds"},
        Case{"WaitMinutes", R"({"action": "wait", "duration": 120})",
             "bad_duration: duration must be between 0 and 30 seconds"},
        Case{"WaitString", R"({"action": "wait", "duration": "2"})",
             "bad_duration: duration must be a number of seconds"},
        Case{"HoldKeyNegative", R"({"action": "hold_key", "text": "a", "duration": -0.5})",
             "bad_duration: duration must be between 0 and 30 seconds"},
        Case{"ZoomWithoutRegion", R"({"action": "zoom"})",
             "bad_region: zoom needs region [x0, y0, x1, y1]"},
        Case{"ZoomThreeNumbers", R"({"action": "zoom", "region": [0, 0, 10]})",
             "bad_region: zoom needs region [x0, y0, x1, y1]"},
        Case{"ZoomFloat", R"({"action": "zoom", "region": [0, 0, 10.5, 10]})",
             "bad_region: region must hold 4 integers"},
        Case{"ZoomEmpty", R"({"action": "zoom", "region": [10, 10, 10, 20]})",
             "bad_region: region [10, 10, 10, 20] must lie within the 1280x800 display with "
             "x0 < x1 and y0 < y1"},
        Case{"ZoomReversed", R"({"action": "zoom", "region": [10, 20, 30, 5]})",
             "bad_region: region [10, 20, 30, 5] must lie within the 1280x800 display with "
             "x0 < x1 and y0 < y1"},
        Case{"ZoomNegative", R"({"action": "zoom", "region": [-1, 0, 5, 5]})",
             "bad_region: region [-1, 0, 5, 5] must lie within the 1280x800 display with "
             "x0 < x1 and y0 < y1"},
        Case{"ZoomPastTheEdge", R"({"action": "zoom", "region": [0, 0, 1281, 800]})",
             "bad_region: region [0, 0, 1281, 800] must lie within the 1280x800 display with "
             "x0 < x1 and y0 < y1"},
        Case{"ZoomPastTheDeclaredDisplay", R"({"action": "zoom", "region": [0, 0, 1024, 641]})",
             "bad_region: region [0, 0, 1024, 641] must lie within the 1024x640 display with "
             "x0 < x1 and y0 < y1",
             kScaled}),
    CaseName);

// Text that JSON text cannot carry (invalid UTF-8) or that is long: built here.
TEST(AnthropicError, TypeInvalidUtf8) {
  json input = {{"action", "type"}, {"text", std::string("a\xff")}};
  EXPECT_EQ(Anthropic(input, kScreen), "bad_text: invalid UTF-8 at byte 1");
}

TEST(AnthropicError, TypeTruncatedUtf8) {
  json input = {{"action", "type"}, {"text", std::string("ab\xc3")}};
  EXPECT_EQ(Anthropic(input, kScreen), "bad_text: invalid UTF-8 at byte 2");
}

TEST(AnthropicError, TypeTooLong) {
  json input = {{"action", "type"}, {"text", std::string(10001, 'a')}};
  EXPECT_EQ(Anthropic(input, kScreen), "bad_text: text has more than 10000 characters");
}

TEST(AnthropicError, TypeLongestIsAccepted) {
  json input = {{"action", "type"}, {"text", std::string(10000, 'a')}};
  auto step = ParseAnthropic(input, kScreen);
  ASSERT_TRUE(step) << step.error().message;
  ASSERT_EQ(step->actions.size(), 1u);
  EXPECT_EQ(step->actions[0].text.size(), 10000u);
}

// The bare input is checked itself too (ParseAnthropic is also called without ParseAnthropicCall).
TEST(AnthropicError, InputNotAnObject) {
  auto step = ParseAnthropic(json::array(), kScreen);
  ASSERT_FALSE(step);
  EXPECT_EQ(Outcome(step.error()),
            "not_an_object: the body must be the tool's input object (or a tool_use block)");
}

// A coordinate beyond int64 is refused, and the message shows it as given (not wrapped to -1).
TEST(AnthropicError, HugeCoordinateIsNamedAsGiven) {
  EXPECT_EQ(Anthropic(json::parse(R"({"action": "left_click",
                                      "coordinate": [18446744073709551615, 0]})"),
                      kScreen),
            "outside_display: coordinate [18446744073709551615, 0] is outside the 1280x800 "
            "display");
}

}  // namespace
}  // namespace deskbox::computer_use::test
