// OpenAI computer_call items that cannot be performed: each class of mistake, its code, and the
// message of the 400, word for word.
#include <gtest/gtest.h>

#include <string>

#include "computer_use/openai.h"
#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;

class OpenAiError : public ::testing::TestWithParam<Case> {};

TEST_P(OpenAiError, IsRefusedWithItsMessage) {
  EXPECT_EQ(OpenAi(json::parse(GetParam().input), GetParam().display), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Item, OpenAiError,
    ::testing::Values(
        Case{"BodyIsAList", R"([{"type": "screenshot"}])",
             "not_an_object: the body must be a computer_call item or an action object"},
        Case{"BodyIsNull", "null",
             "not_an_object: the body must be a computer_call item or an action object"},
        Case{"CallIdNotAString", R"({"type": "computer_call", "call_id": 5,
                                     "action": {"type": "screenshot"}})",
             "wrong_type: call_id must be a string"},
        Case{"NeitherActionNorActions", R"({"type": "computer_call", "call_id": "c"})",
             "missing_field: a computer_call needs action or actions"},
        Case{"ActionsNotAList", R"({"type": "computer_call", "actions": {"type": "wait"}})",
             "wrong_type: actions must be a list of 1 to 100 actions"},
        Case{"ActionsEmpty", R"({"type": "computer_call", "actions": []})",
             "out_of_range: actions must be a list of 1 to 100 actions"},
        Case{"ActionNotAnObject", R"({"type": "computer_call", "action": "click"})",
             "not_an_object: action must be an object"},
        Case{"ActionNull", R"({"type": "computer_call", "action": null})",
             "not_an_object: action must be an object"},
        // The first bad entry is named by its index; nothing before it counts.
        Case{"ListedActionNotAnObject",
             R"({"type": "computer_call", "actions": [{"type": "wait"}, 5]})",
             "not_an_object: actions[1] must be an object"},
        Case{"ListedActionUnknown",
             R"({"type": "computer_call", "actions": [{"type": "move", "x": 1, "y": 1},
                                                      {"type": "swipe"}]})",
             "unknown_action: actions[1].type: unknown action 'swipe'"},
        Case{"MissingType", R"({"x": 1, "y": 2})", "missing_field: action.type is required"},
        Case{"TypeNotAString", R"({"type": 4})", "wrong_type: action.type is required"},
        Case{"UnknownType", R"({"type": "swipe"})",
             "unknown_action: action.type: unknown action 'swipe'"},
        Case{"UnknownTypeLongName", R"({"type": ")" + std::string(80, 'q') + R"("})",
             "unknown_action: action.type: unknown action '" + std::string(64, 'q') + "'"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Coordinates, OpenAiError,
    ::testing::Values(
        Case{"ClickWithoutX", R"({"type": "click", "y": 2, "button": "left"})",
             "missing_field: action.x is required"},
        Case{"XWithoutY", R"({"type": "click", "x": 2, "button": "left"})",
             "missing_field: action.y is required"},
        Case{"XIsAString", R"({"type": "move", "x": "5", "y": 2})",
             "bad_coordinate: action.x must be an integer"},
        Case{"YIsAFloat", R"({"type": "move", "x": 5, "y": 2.5})",
             "bad_coordinate: action.y must be an integer"},
        Case{"NegativeX", R"({"type": "click", "x": -1, "y": 5, "button": "left"})",
             "outside_display: action: (-1, 5) is outside the 1280x800 display"},
        Case{"XEqualsWidth", R"({"type": "move", "x": 1280, "y": 0})",
             "outside_display: action: (1280, 0) is outside the 1280x800 display"},
        Case{"YEqualsHeight", R"({"type": "scroll", "x": 0, "y": 800, "scroll_y": 100})",
             "outside_display: action: (0, 800) is outside the 1280x800 display"},
        Case{"OutsideDeclaredDisplay", R"({"type": "double_click", "x": 1100, "y": 5})",
             "outside_display: action: (1100, 5) is outside the 1024x640 display", kScaled},
        Case{"UnknownButton", R"({"type": "click", "x": 1, "y": 2, "button": "up"})",
             "bad_button: action.button must be left, right, wheel, back or forward"},
        // RFB carries buttons 1 to 8; forward is X button 9.
        Case{"ForwardButton", R"({"type": "click", "x": 1, "y": 2, "button": "forward"})",
             "bad_button: action.button: 'forward' (X button 9) cannot be sent over the guest's "
             "RFB, which carries buttons 1 to 8"},
        Case{"DragOnePoint", R"({"type": "drag", "path": [{"x": 1, "y": 2}]})",
             "bad_path: action.path must hold 2 to 1000 points"},
        Case{"DragWithoutPath", R"({"type": "drag"})",
             "bad_path: action.path must hold 2 to 1000 points"},
        Case{"DragPathNotAList", R"({"type": "drag", "path": {"x": 1, "y": 2}})",
             "bad_path: action.path must hold 2 to 1000 points"},
        Case{"DragPointAsPair", R"({"type": "drag", "path": [[1, 2], [3, 4]]})",
             "bad_coordinate: action.path[0] must be {\"x\", \"y\"}"},
        Case{"DragPointWithoutY", R"({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3}]})",
             "bad_coordinate: action.path[1] must be {\"x\", \"y\"}"},
        Case{"DragPointFloat",
             R"({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3.5, "y": 4}]})",
             "bad_coordinate: action.path[1] must be {\"x\", \"y\"}"},
        Case{"DragPointOutside",
             R"({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 1280, "y": 0}]})",
             "outside_display: action.path[1] (1280, 0) is outside the 1280x800 display"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    KeysTextScrollWait, OpenAiError,
    ::testing::Values(
        Case{"KeypressWithoutKeys", R"({"type": "keypress"})",
             "bad_key: action.keys must be a list of 1 to 8 key names"},
        Case{"KeypressNoKeys", R"({"type": "keypress", "keys": []})",
             "bad_key: action.keys must be a list of 1 to 8 key names"},
        Case{"KeypressKeysAString", R"({"type": "keypress", "keys": "CTRL+A"})",
             "bad_key: action.keys must be a list of 1 to 8 key names"},
        Case{"KeypressNineKeys",
             R"({"type": "keypress", "keys": ["a", "b", "c", "d", "e", "f", "g", "h", "i"]})",
             "bad_key: action.keys must be a list of 1 to 8 key names"},
        Case{"KeypressNotAString", R"({"type": "keypress", "keys": ["CTRL", 65]})",
             "bad_key: action.keys must hold strings"},
        Case{"KeypressUnknownName", R"({"type": "keypress", "keys": ["CTRL", "CONTROLX"]})",
             "bad_key: action.keys: unknown key 'CONTROLX'"},
        Case{"KeypressEmptyName", R"({"type": "keypress", "keys": [""]})",
             "bad_key: action.keys: empty key name"},
        // A keypress key is one name, not a combo.
        Case{"KeypressCombo", R"({"type": "keypress", "keys": ["ctrl+a"]})",
             "bad_key: action.keys: unknown key 'ctrl+a'"},
        Case{"TypeWithoutText", R"({"type": "type"})", "missing_field: action.text is required"},
        Case{"TypeTextNotAString", R"({"type": "type", "text": 5})",
             "bad_text: action.text is required"},
        Case{"TypeControlCharacter", R"({"type": "type", "text": "\u001b[A"})",
             "bad_text: action: text contains the control character U+001B (use a key action)"},
        Case{"ScrollZero", R"({"type": "scroll", "x": 1, "y": 2, "scroll_x": 0, "scroll_y": 0})",
             "bad_scroll: action: scroll_x or scroll_y must be non-zero"},
        Case{"ScrollWithoutAmounts", R"({"type": "scroll", "x": 1, "y": 2})",
             "bad_scroll: action: scroll_x or scroll_y must be non-zero"},
        Case{"ScrollTooFar", R"({"type": "scroll", "x": 1, "y": 2, "scroll_y": 10050})",
             "bad_scroll: action: at most 10000 px per axis"},
        Case{"ScrollTooFarLeft", R"({"type": "scroll", "x": 1, "y": 2, "scroll_x": -10050})",
             "bad_scroll: action: at most 10000 px per axis"},
        Case{"ScrollLongestNegative",
             R"({"type": "scroll", "x": 1, "y": 2, "scroll_x": -9223372036854775808})",
             "bad_scroll: action: at most 10000 px per axis"},
        Case{"ScrollFloat", R"({"type": "scroll", "x": 1, "y": 2, "scroll_x": 1.5})",
             "bad_scroll: action.scroll_x must be an integer"},
        Case{"ScrollString", R"({"type": "scroll", "x": 1, "y": 2, "scroll_y": "100"})",
             "bad_scroll: action.scroll_y must be an integer"},
        Case{"WaitNegative", R"({"type": "wait", "duration_ms": -1})",
             "bad_duration: action: duration must be between 0 and 30 s"},
        Case{"WaitTooLong", R"({"type": "wait", "duration_ms": 30001})",
             "bad_duration: action: duration must be between 0 and 30 s"},
        Case{"WaitFloat", R"({"type": "wait", "duration_ms": 1.5})",
             "bad_duration: action.duration_ms must be an integer"},
        Case{"WaitString", R"({"type": "wait", "duration_ms": "100"})",
             "bad_duration: action.duration_ms must be an integer"}),
    CaseName);

TEST(OpenAiError, MoreThanHundredActions) {
  json body = {{"type", "computer_call"}, {"actions", json::array()}};
  for (int i = 0; i < 101; ++i) body["actions"].push_back({{"type", "wait"}});
  EXPECT_EQ(OpenAi(body, kScreen), "out_of_range: actions must be a list of 1 to 100 actions");
}

TEST(OpenAiError, DragPathTooLong) {
  json path = json::array();
  for (int i = 0; i < 1001; ++i) path.push_back({{"x", i % 1280}, {"y", 1}});
  EXPECT_EQ(OpenAi({{"type", "drag"}, {"path", path}}, kScreen),
            "bad_path: action.path must hold 2 to 1000 points");
  path.erase(path.end() - 1);
  EXPECT_EQ(OpenAi({{"type", "drag"}, {"path", path}}, kScreen).substr(0, 12), "drag path=0,");
}

TEST(OpenAiError, TypeInvalidUtf8) {
  EXPECT_EQ(OpenAi({{"type", "type"}, {"text", std::string("ok\xe4\xb8")}}, kScreen),
            "bad_text: action.text: invalid UTF-8 at byte 2");
}

TEST(OpenAiError, TypeTooLong) {
  EXPECT_EQ(OpenAi({{"type", "type"}, {"text", std::string(10001, 'x')}}, kScreen),
            "bad_text: action: text has more than 10000 characters");
}

// An x beyond int64 is refused, and the message shows it as given (not wrapped to -1).
TEST(OpenAiError, HugeCoordinateIsNamedAsGiven) {
  EXPECT_EQ(OpenAi(json::parse(R"({"type": "move", "x": 18446744073709551615, "y": 0})"), kScreen),
            "outside_display: action: (18446744073709551615, 0) is outside the 1280x800 display");
}

}  // namespace
}  // namespace deskbox::computer_use::test
