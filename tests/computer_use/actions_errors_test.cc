// Actions bodies that are refused: each class of mistake in the envelope and in each action type,
// its code, and the message of the 400, word for word.
#include <gtest/gtest.h>

#include <string>

#include "computer_use/actions.h"
#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;

// Rows are whole bodies.
class BodyError : public ::testing::TestWithParam<Case> {};

TEST_P(BodyError, IsRefusedWithItsMessage) {
  EXPECT_EQ(Body(json::parse(GetParam().input), GetParam().display), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Envelope, BodyError,
    ::testing::Values(
        Case{"NotAnObject", R"([{"type": "wait"}])", "not_an_object: body must be a JSON object"},
        Case{"MissingActions", R"({})", "missing_field: actions is required (a list of actions)"},
        Case{"NullActions", R"({"actions": null})",
             "missing_field: actions is required (a list of actions)"},
        Case{"ActionsNotAList", R"({"actions": {"type": "wait"}})",
             "wrong_type: actions must be an array"},
        Case{"NoActions", R"({"actions": []})", "out_of_range: actions must have 1 to 100 entries"},
        Case{"UnknownMember", R"({"actions": [{"type": "wait"}], "timeout": 5})",
             "unknown_field: unknown field 'timeout'"},
        Case{"DisplayNoSide", R"({"actions": [{"type": "wait"}], "display": "0x5"})",
             "bad_display: display must be WIDTHxHEIGHT with sides 1 to 4096 (got '0x5')"},
        Case{"DisplayNoX", R"({"actions": [{"type": "wait"}], "display": "12"})",
             "bad_display: display must be WIDTHxHEIGHT (got '12')"},
        Case{"DisplayTooWide", R"({"actions": [{"type": "wait"}], "display": "99999x1"})",
             "bad_display: display must be WIDTHxHEIGHT with sides 1 to 4096 (got '99999x1')"},
        Case{"DisplayExtraMember",
             R"({"actions": [{}], "display": {"width": 1024, "height": 640, "depth": 24}})",
             "bad_display: unknown field 'display.depth'"},
        Case{"DisplayNumber", R"({"actions": [{}], "display": 1024})",
             "bad_display: display must be \"WIDTHxHEIGHT\" or {\"width\", \"height\"}"},
        Case{"SettleString", R"({"actions": [{}], "settle": "yes"})",
             "wrong_type: settle must be true, false or {\"quiet_ms\", \"timeout_ms\", "
             "\"no_change_ms\"}"},
        Case{"SettleQuietTooLong", R"({"actions": [{}], "settle": {"quiet_ms": 5001}})",
             "out_of_range: settle.quiet_ms must be between 0 and 5000 (got 5001)"},
        Case{"SettleTimeoutNegative", R"({"actions": [{}], "settle": {"timeout_ms": -1}})",
             "out_of_range: settle.timeout_ms must be between 0 and 30000 (got -1)"},
        Case{"SettleNoChangeTooLong", R"({"actions": [{}], "settle": {"no_change_ms": 30001}})",
             "out_of_range: settle.no_change_ms must be between 0 and 30000 (got 30001)"},
        Case{"SettleQuietString", R"({"actions": [{}], "settle": {"quiet_ms": "100"}})",
             "wrong_type: settle.quiet_ms must be an integer"},
        Case{"SettleUnknownMember", R"({"actions": [{}], "settle": {"quiet": 100}})",
             "unknown_field: unknown field 'settle.quiet'"},
        Case{"ScreenshotString", R"({"actions": [{}], "screenshot": "png"})",
             "wrong_type: screenshot must be true, false or {\"format\", \"quality\"}"},
        Case{"ScreenshotGif", R"({"actions": [{}], "screenshot": {"format": "gif"}})",
             "bad_image_format: screenshot.format must be one of png, jpeg (got 'gif')"},
        Case{"ScreenshotUpperCase", R"({"actions": [{}], "screenshot": {"format": "PNG"}})",
             "bad_image_format: screenshot.format must be one of png, jpeg (got 'PNG')"},
        Case{"ScreenshotFormatNumber", R"({"actions": [{}], "screenshot": {"format": 1}})",
             "bad_image_format: screenshot.format must be a string"},
        Case{"ScreenshotQualityZero", R"({"actions": [{}], "screenshot": {"quality": 0}})",
             "out_of_range: screenshot.quality must be between 1 and 100 (got 0)"},
        Case{"ScreenshotQuality101",
             R"({"actions": [{}], "screenshot": {"format": "jpeg", "quality": 101}})",
             "out_of_range: screenshot.quality must be between 1 and 100 (got 101)"},
        Case{"ScreenshotUnknownMember", R"({"actions": [{}], "screenshot": {"width": 640}})",
             "unknown_field: unknown field 'screenshot.width'"},
        // Off the body's display, though on the screen.
        Case{"PointOutsideDeclaredDisplay",
             R"({"display": "1024x640", "actions": [{"type": "move", "x": 1024, "y": 0}]})",
             "outside_display: actions[0].x must be between 0 and 1023 (got 1024)"},
        Case{"DragOutsideDeclaredDisplay",
             R"({"display": {"width": 1024, "height": 640},
                 "actions": [{"type": "drag", "path": [[1, 2], [1023, 640]]}]})",
             "outside_display: actions[0].path[1] (1023, 640) is outside the 1024x640 display"},
        // The first bad action is the error, named by its index.
        Case{"ActionNotAnObject", R"({"actions": [{"type": "wait"}, "click"]})",
             "not_an_object: actions[1] must be an object"}),
    CaseName);

// Rows are one action each; the body around it is {"actions": [row]}.
class ActionError : public ::testing::TestWithParam<Case> {};

TEST_P(ActionError, IsRefusedWithItsMessage) {
  json body = {{"actions", json::array({json::parse(GetParam().input)})}};
  EXPECT_EQ(Body(body, GetParam().display), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    TypeAndPoints, ActionError,
    ::testing::Values(
        Case{"MissingType", R"({"x": 1, "y": 2})", "missing_field: actions[0].type is required"},
        Case{"TypeNotAString", R"({"type": ["move"]})",
             "wrong_type: actions[0].type must be a string"},
        Case{"UnknownType", R"({"type": "jump"})",
             "unknown_action: actions[0].type must be one of move, click, mouse_down, mouse_up, "
             "drag, scroll, type, key, hold_key, wait (got 'jump')"},
        Case{"LongType", R"({"type": ")" + std::string(65, 'k') + R"("})",
             "unknown_action: actions[0].type must be 0 to 64 bytes long (got 65)"},
        // A member another type has is still unknown here.
        Case{"MoveWithButton", R"({"type": "move", "x": 1, "y": 2, "button": "left"})",
             "unknown_field: unknown field 'actions[0].button'"},
        Case{"WaitWithKeys", R"({"type": "wait", "keys": "a"})",
             "unknown_field: unknown field 'actions[0].keys'"},
        Case{"MoveWithoutPoint", R"({"type": "move"})",
             "missing_field: actions[0].x and actions[0].y are required"},
        Case{"XWithoutY", R"({"type": "click", "x": 5})",
             "bad_coordinate: actions[0].x and actions[0].y go together"},
        Case{"YWithoutX", R"({"type": "mouse_down", "y": 5})",
             "bad_coordinate: actions[0].x and actions[0].y go together"},
        Case{"XIsAString", R"({"type": "move", "x": "5", "y": 2})",
             "bad_coordinate: actions[0].x must be an integer"},
        Case{"YIsAFloat", R"({"type": "move", "x": 5, "y": 2.5})",
             "bad_coordinate: actions[0].y must be an integer"},
        Case{"NegativeX", R"({"type": "move", "x": -1, "y": 2})",
             "outside_display: actions[0].x must be between 0 and 1279 (got -1)"},
        Case{"XEqualsWidth", R"({"type": "click", "x": 1280, "y": 2})",
             "outside_display: actions[0].x must be between 0 and 1279 (got 1280)"},
        Case{"YEqualsHeight", R"({"type": "scroll", "x": 0, "y": 800, "dy": 1})",
             "outside_display: actions[0].y must be between 0 and 799 (got 800)"},
        Case{"HugeX", R"({"type": "move", "x": 18446744073709551615, "y": 2})",
             "outside_display: actions[0].x must be between 0 and 1279"},
        Case{"CountZero", R"({"type": "click", "count": 0})",
             "out_of_range: actions[0].count must be between 1 and 10 (got 0)"},
        Case{"CountEleven", R"({"type": "click", "count": 11})",
             "out_of_range: actions[0].count must be between 1 and 10 (got 11)"},
        Case{"CountString", R"({"type": "click", "count": "2"})",
             "wrong_type: actions[0].count must be an integer"},
        Case{"UnknownButton", R"({"type": "click", "button": "wheel"})",
             "bad_button: actions[0].button must be one of left, middle, right, back (got "
             "'wheel')"},
        Case{"ButtonNumber", R"({"type": "mouse_up", "button": 1})",
             "bad_button: actions[0].button must be a string"},
        Case{"ButtonTooLong",
             R"({"type": "mouse_up", "button": ")" + std::string(65, 'b') + R"("})",
             "bad_button: actions[0].button must be 0 to 64 bytes long (got 65)"},
        Case{"ModifiersNumber", R"({"type": "click", "modifiers": 4})",
             "bad_key: actions[0].modifiers must be a string (\"ctrl+shift\") or a list of at "
             "most 8 key names"},
        Case{"ModifiersNineNames",
             R"({"type": "click", "modifiers": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]})",
             "bad_key: actions[0].modifiers must be a string (\"ctrl+shift\") or a list of at "
             "most 8 key names"},
        Case{"ModifiersListOfNumbers", R"({"type": "scroll", "dy": 1, "modifiers": [1]})",
             "bad_key: actions[0].modifiers must be a string or a list of key names"},
        Case{"ModifiersUnknown", R"({"type": "drag", "path": [[1, 2], [3, 4]],
                                     "modifiers": "hyperx"})",
             "bad_key: actions[0].modifiers: unknown key 'hyperx'"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    PathScrollTextKeysDuration, ActionError,
    ::testing::Values(
        Case{"DragWithoutPath", R"({"type": "drag"})",
             "missing_field: actions[0].path is required"},
        Case{"DragPathNotAList", R"({"type": "drag", "path": {"x": 1, "y": 2}})",
             "bad_path: actions[0].path must be an array"},
        Case{"DragOnePoint", R"({"type": "drag", "path": [[1, 2]]})",
             "bad_path: actions[0].path must have 2 to 1000 points"},
        Case{"DragPointOnlyX", R"({"type": "drag", "path": [[1], [3, 4]]})",
             "bad_coordinate: actions[0].path[0] must be {\"x\": int, \"y\": int} or [x, y]"},
        Case{"DragPointStrings", R"({"type": "drag", "path": [[1, 2], ["3", "4"]]})",
             "bad_coordinate: actions[0].path[1] must be {\"x\": int, \"y\": int} or [x, y]"},
        Case{"DragPointExtraMember",
             R"({"type": "drag", "path": [[1, 2], {"x": 3, "y": 4, "z": 5}]})",
             "bad_coordinate: actions[0].path[1] must be {\"x\": int, \"y\": int} or [x, y]"},
        Case{"DragPointOutside", R"({"type": "drag", "path": [[1, 2], {"x": 1280, "y": 0}]})",
             "outside_display: actions[0].path[1] (1280, 0) is outside the 1280x800 display"},
        Case{"DragPointNegative", R"({"type": "drag", "path": [[0, -3], [1, 2]]})",
             "outside_display: actions[0].path[0] (0, -3) is outside the 1280x800 display"},
        Case{"ScrollZero", R"({"type": "scroll", "dx": 0, "dy": 0})",
             "bad_scroll: actions[0]: dx or dy (wheel steps) must be non-zero"},
        Case{"ScrollNoSteps", R"({"type": "scroll", "x": 1, "y": 2})",
             "bad_scroll: actions[0]: dx or dy (wheel steps) must be non-zero"},
        Case{"ScrollTooFar", R"({"type": "scroll", "dy": 101})",
             "bad_scroll: actions[0].dy must be between -100 and 100 (got 101)"},
        Case{"ScrollTooFarLeft", R"({"type": "scroll", "dx": -101})",
             "bad_scroll: actions[0].dx must be between -100 and 100 (got -101)"},
        Case{"ScrollFloat", R"({"type": "scroll", "dy": 1.5})",
             "bad_scroll: actions[0].dy must be an integer"},
        Case{"TypeWithoutText", R"({"type": "type"})",
             "missing_field: actions[0].text is required"},
        Case{"TypeTextNotAString", R"({"type": "type", "text": 42})",
             "bad_text: actions[0].text must be a string"},
        Case{"TypeControlCharacter", R"({"type": "type", "text": "bell\u0007"})",
             "bad_text: actions[0]: text contains the control character U+0007 (use a key "
             "action)"},
        Case{"KeyWithoutKeys", R"({"type": "key"})",
             "missing_field: actions[0].keys is required (e.g. \"ctrl+shift+t\", \"Return\")"},
        Case{"KeyEmpty", R"({"type": "key", "keys": ""})",
             "bad_key: actions[0].keys must be 1 to 1024 bytes long (got 0)"},
        Case{"KeyNotAString", R"({"type": "key", "keys": ["ctrl", "a"]})",
             "bad_key: actions[0].keys must be a string"},
        Case{"KeyUnknownInCombo", R"({"type": "key", "keys": "ctrl+Retrun"})",
             "bad_key: actions[0].keys: in 'ctrl+Retrun': unknown key 'Retrun'"},
        Case{"KeyComboEndsWithPlus", R"({"type": "key", "keys": "ctrl+"})",
             "bad_key: actions[0].keys: 'ctrl+' ends with '+'"},
        Case{"HoldKeySequence", R"({"type": "hold_key", "keys": "a b"})",
             "bad_key: actions[0].keys: unknown key 'a b'"},
        Case{"HoldKeyWithoutKeys", R"({"type": "hold_key", "duration_ms": 100})",
             "missing_field: actions[0].keys is required (e.g. \"ctrl+shift+t\", \"Return\")"},
        Case{"HoldKeyTooLong", R"({"type": "hold_key", "keys": "a", "duration_ms": 30001})",
             "bad_duration: actions[0].duration_ms must be between 0 and 30000 (got 30001)"},
        Case{"WaitNegative", R"({"type": "wait", "duration_ms": -1})",
             "bad_duration: actions[0].duration_ms must be between 0 and 30000 (got -1)"},
        Case{"WaitFloat", R"({"type": "wait", "duration_ms": 1.5})",
             "bad_duration: actions[0].duration_ms must be an integer"}),
    CaseName);

TEST(BodyError, TooManyActions) {
  json body = {{"actions", json::array()}};
  for (int i = 0; i < 101; ++i) body["actions"].push_back({{"type", "wait"}});
  EXPECT_EQ(Body(body, kScreen), "out_of_range: actions must have 1 to 100 entries");
}

TEST(ActionError, DragTooManyPoints) {
  json path = json::array();
  for (int i = 0; i < 1001; ++i) path.push_back({i % 1280, 5});
  EXPECT_EQ(Body({{"actions", {{{"type", "drag"}, {"path", path}}}}}, kScreen),
            "bad_path: actions[0].path must have 2 to 1000 points");
}

TEST(ActionError, TypeInvalidUtf8) {
  EXPECT_EQ(Body({{"actions", {{{"type", "type"}, {"text", std::string("\xc0\xaf")}}}}}, kScreen),
            "bad_text: actions[0].text: invalid UTF-8 at byte 0");
}

// 10001 characters in at most 40000 bytes: too many characters.
TEST(ActionError, TypeTooManyCharacters) {
  EXPECT_EQ(Body({{"actions", {{{"type", "type"}, {"text", std::string(10001, 'a')}}}}}, kScreen),
            "bad_text: actions[0].text has more than 10000 characters");
}

// More than 4 bytes per allowed character: refused before it is decoded.
TEST(ActionError, TypeTooManyBytes) {
  EXPECT_EQ(Body({{"actions", {{{"type", "type"}, {"text", std::string(40001, 'a')}}}}}, kScreen),
            "bad_text: actions[0].text must be 0 to 40000 bytes long (got 40001)");
}

TEST(ActionError, TypeLongestIsAccepted) {
  std::string text;
  for (int i = 0; i < 10000; ++i) text += "\xf0\x9f\x99\x82";  // U+1F642, 4 bytes
  auto a = ParseAction({{"type", "type"}, {"text", text}}, 0, kScreen);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->text.size(), 10000u);
}

TEST(ActionError, KeyTooManyCombos) {
  std::string keys;
  for (int i = 0; i < 65; ++i) keys += "a ";
  EXPECT_EQ(Body({{"actions", {{{"type", "key"}, {"keys", keys}}}}}, kScreen),
            "bad_key: actions[0].keys: more than 64 key combos in one action");
}

TEST(ActionError, KeyTooLong) {
  EXPECT_EQ(Body({{"actions", {{{"type", "key"}, {"keys", std::string(1025, 'a')}}}}}, kScreen),
            "bad_key: actions[0].keys must be 1 to 1024 bytes long (got 1025)");
}

// The first bad action is the error, however many good ones come before it.
TEST(ActionError, FirstBadActionIsNamed) {
  auto actions = ParseActions(json::parse(R"([{"type": "wait"}, {"type": "click"},
      {"type": "key", "keys": "Nope"}, {"type": "jump"}])"),
                              kScreen);
  ASSERT_FALSE(actions);
  EXPECT_EQ(Outcome(actions.error()), "bad_key: actions[2].keys: unknown key 'Nope'");
}

// The message docs/computer-use.md and error.h quote: a combo of one key is not named twice.
TEST(ActionError, UnknownKeyMessageAsDocumented) {
  auto actions = ParseActions(json::parse(R"([{"type": "wait"}, {"type": "wait"},
      {"type": "wait"}, {"type": "key", "keys": "Retrun"}])"),
                              kScreen);
  ASSERT_FALSE(actions);
  EXPECT_EQ(Outcome(actions.error()), "bad_key: actions[3].keys: unknown key 'Retrun'");
}

}  // namespace
}  // namespace deskbox::computer_use::test
