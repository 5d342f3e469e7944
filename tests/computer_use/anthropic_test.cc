// Anthropic computer tool inputs (computer_20250124 and newer) as models emit them: every action
// of the schema, the typed action it becomes, and the tool_use block around it.
#include "computer_use/anthropic.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "vnc_bridge/keys.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;

class AnthropicExample : public ::testing::TestWithParam<Case> {};

TEST_P(AnthropicExample, ParsesToItsAction) {
  EXPECT_EQ(Anthropic(json::parse(GetParam().input), GetParam().display), GetParam().want);
}

// Keysyms: ctrl ffe3, shift ffe1, alt ffe9, Return ff0d, Tab ff09, Up ff52, Delete ffff.
INSTANTIATE_TEST_SUITE_P(
    Keys, AnthropicExample,
    ::testing::Values(
        Case{"KeyReturn", R"({"action": "key", "text": "Return"})", "key keys=ff0d"},
        Case{"KeyLetter", R"({"action": "key", "text": "a"})", "key keys=61"},
        Case{"KeyCtrlS", R"({"action": "key", "text": "ctrl+s"})", "key keys=ffe3+73"},
        Case{"KeyAltTab", R"({"action": "key", "text": "alt+Tab"})", "key keys=ffe9+ff09"},
        Case{"KeyUp", R"({"action": "key", "text": "Up"})", "key keys=ff52"},
        Case{"KeyKeypad0", R"({"action": "key", "text": "KP_0"})", "key keys=ffb0"},
        // xdotool sequences: combos separated by spaces, pressed one after another.
        Case{"KeySequence", R"({"action": "key", "text": "ctrl+a Delete"})",
             "key keys=ffe3+61 ffff"},
        // With shift in the combo a letter goes as its capital (the X server sends what it gets).
        Case{"KeyShiftCapitalises", R"({"action": "key", "text": "ctrl+shift+t"})",
             "key keys=ffe3+ffe1+54"},
        Case{"KeyLoneSpace", R"({"action": "key", "text": " "})", "key keys=20"},
        Case{"HoldKey", R"({"action": "hold_key", "text": "shift", "duration": 2})",
             "hold_key keys=ffe1 duration=2000ms"},
        Case{"HoldKeyCombo", R"({"action": "hold_key", "text": "ctrl+alt", "duration": 1})",
             "hold_key keys=ffe3+ffe9 duration=1000ms"},
        Case{"HoldKeyFractionalSeconds",
             R"({"action": "hold_key", "text": "shift", "duration": 0.25})",
             "hold_key keys=ffe1 duration=250ms"},
        Case{"HoldKeyDefaultsToHalfASecond", R"({"action": "hold_key", "text": "shift"})",
             "hold_key keys=ffe1 duration=500ms"},
        Case{"HoldKeyZeroSeconds", R"({"action": "hold_key", "text": "shift", "duration": 0})",
             "hold_key keys=ffe1"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Text, AnthropicExample,
    ::testing::Values(Case{"TypeAscii", R"({"action": "type", "text": "Hello, world"})",
                           "type text=\"Hello, world\""},
                      Case{"TypeNewlineAndTab", R"({"action": "type", "text": "a\nb\tc\r"})",
                           "type text=\"a\nb\tc\r\""},
                      Case{"TypeUnicode", R"({"action": "type", "text": "héllo 世界 🙂"})",
                           "type text=\"héllo 世界 🙂\""},
                      Case{"TypeEmpty", R"({"action": "type", "text": ""})", "type"}),
    CaseName);

// On the plain 1280x800 screen a display point is the screen point.
INSTANTIATE_TEST_SUITE_P(
    Pointer, AnthropicExample,
    ::testing::Values(
        Case{"CursorPosition", R"({"action": "cursor_position"})", "cursor_position"},
        Case{"MouseMove", R"({"action": "mouse_move", "coordinate": [100, 50]})", "move at=100,50"},
        Case{"MouseMoveLastPixel", R"({"action": "mouse_move", "coordinate": [1279, 799]})",
             "move at=1279,799"},
        Case{"LeftMouseDownWherePointerIs", R"({"action": "left_mouse_down"})", "mouse_down"},
        Case{"LeftMouseDownAt", R"({"action": "left_mouse_down", "coordinate": [10, 20]})",
             "mouse_down at=10,20"},
        Case{"LeftMouseUpWherePointerIs", R"({"action": "left_mouse_up"})", "mouse_up"},
        Case{"LeftMouseUpAt", R"({"action": "left_mouse_up", "coordinate": [30, 40]})",
             "mouse_up at=30,40"},
        Case{"LeftClick", R"({"action": "left_click", "coordinate": [100, 50]})",
             "click at=100,50"},
        Case{"LeftClickWherePointerIs", R"({"action": "left_click"})", "click"},
        Case{"LeftClickNullCoordinate", R"({"action": "left_click", "coordinate": null})", "click"},
        Case{"RightClick", R"({"action": "right_click", "coordinate": [100, 50]})",
             "click at=100,50 button=right"},
        Case{"MiddleClick", R"({"action": "middle_click", "coordinate": [100, 50]})",
             "click at=100,50 button=middle"},
        Case{"DoubleClick", R"({"action": "double_click", "coordinate": [100, 50]})",
             "click at=100,50 count=2"},
        Case{"TripleClick", R"({"action": "triple_click", "coordinate": [100, 50]})",
             "click at=100,50 count=3"},
        // Newer tool versions: modifier keys held during the click, in `text`.
        Case{"LeftClickWithShift",
             R"({"action": "left_click", "coordinate": [100, 50], "text": "shift"})",
             "click at=100,50 mods=ffe1"},
        Case{"RightClickWithCtrlShift",
             R"({"action": "right_click", "coordinate": [1, 2], "text": "ctrl+shift"})",
             "click at=1,2 button=right mods=ffe3+ffe1"},
        Case{"DoubleClickEmptyModifiers",
             R"({"action": "double_click", "coordinate": [1, 2], "text": ""})",
             "click at=1,2 count=2"},
        Case{"LeftClickDrag",
             R"({"action": "left_click_drag", "start_coordinate": [10, 20],
                 "coordinate": [300, 200]})",
             "drag path=10,20;300,200"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    Scroll, AnthropicExample,
    ::testing::Values(
        Case{"ScrollUp",
             R"({"action": "scroll", "coordinate": [100, 50], "scroll_direction": "up",
                 "scroll_amount": 5})",
             "scroll at=100,50 dy=-5"},
        Case{"ScrollDown",
             R"({"action": "scroll", "coordinate": [100, 50], "scroll_direction": "down",
                 "scroll_amount": 5})",
             "scroll at=100,50 dy=5"},
        Case{"ScrollLeft",
             R"({"action": "scroll", "coordinate": [100, 50], "scroll_direction": "left",
                 "scroll_amount": 2})",
             "scroll at=100,50 dx=-2"},
        Case{"ScrollRight",
             R"({"action": "scroll", "coordinate": [100, 50], "scroll_direction": "right",
                 "scroll_amount": 100})",
             "scroll at=100,50 dx=100"},
        Case{"ScrollDefaultsToThreeSteps", R"({"action": "scroll", "scroll_direction": "down"})",
             "scroll dy=3"},
        Case{"ScrollWithCtrl",
             R"({"action": "scroll", "coordinate": [5, 6], "scroll_direction": "up",
                 "scroll_amount": 1, "text": "ctrl"})",
             "scroll at=5,6 dy=-1 mods=ffe3"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    WaitScreenshotZoom, AnthropicExample,
    ::testing::Values(
        Case{"WaitDefaultsToOneSecond", R"({"action": "wait"})", "wait duration=1000ms"},
        Case{"WaitSeconds", R"({"action": "wait", "duration": 2})", "wait duration=2000ms"},
        Case{"WaitFractionalSeconds", R"({"action": "wait", "duration": 1.5})",
             "wait duration=1500ms"},
        Case{"WaitLongest", R"({"action": "wait", "duration": 30})", "wait duration=30000ms"},
        Case{"Screenshot", R"({"action": "screenshot"})", "(no action)"},
        Case{"Zoom", R"({"action": "zoom", "region": [0, 0, 640, 400]})", "zoom 0,0 640x400"},
        Case{"ZoomWholeScreen", R"({"action": "zoom", "region": [0, 0, 1280, 800]})",
             "zoom 0,0 1280x800"}),
    CaseName);

// display 1024x640 over the 1280x800 screen: display point (x, y) lands on screen pixel
// (floor((x + 0.5) * 1.25), floor((y + 0.5) * 1.25)).
INSTANTIATE_TEST_SUITE_P(
    Scaled, AnthropicExample,
    ::testing::Values(
        Case{"MouseMove", R"({"action": "mouse_move", "coordinate": [100, 50]})", "move at=125,63",
             kScaled},
        Case{"FirstPixel", R"({"action": "left_click", "coordinate": [0, 0]})", "click at=0,0",
             kScaled},
        Case{"LastPixel", R"({"action": "left_click", "coordinate": [1023, 639]})",
             "click at=1279,799", kScaled},
        Case{"Centre", R"({"action": "right_click", "coordinate": [512, 320]})",
             "click at=640,400 button=right", kScaled},
        Case{"MouseDown", R"({"action": "left_mouse_down", "coordinate": [10, 20]})",
             "mouse_down at=13,25", kScaled},
        Case{"Drag",
             R"({"action": "left_click_drag", "start_coordinate": [10, 20],
                 "coordinate": [300, 200]})",
             "drag path=13,25;375,250", kScaled},
        Case{"Scroll",
             R"({"action": "scroll", "coordinate": [100, 50], "scroll_direction": "down"})",
             "scroll at=125,63 dy=3", kScaled},
        // Region edges map to the nearest screen pixel edge: 62.5 → 63, 312.5 → 313.
        Case{"Zoom", R"({"action": "zoom", "region": [100, 50, 300, 250]})", "zoom 125,63 250x250",
             kScaled},
        // A display larger than the screen: 2/3 screen pixel per display pixel.
        Case{"LargerDisplayCentre", R"({"action": "mouse_move", "coordinate": [960, 600]})",
             "move at=640,400", kLarger},
        Case{"LargerDisplayLastPixel", R"({"action": "mouse_move", "coordinate": [1919, 1199]})",
             "move at=1279,799", kLarger},
        // A zoom region is at least one screen pixel, however the display rounds.
        Case{"LargerDisplayZoomOnePixel", R"({"action": "zoom", "region": [0, 0, 1, 1]})",
             "zoom 0,0 1x1", kLarger},
        Case{"LargerDisplayZoomLastPixel",
             R"({"action": "zoom", "region": [1919, 1199, 1920, 1200]})", "zoom 1279,799 1x1",
             kLarger}),
    CaseName);

TEST(AnthropicCall, ToolUseBlockGivesItsInputAndId) {
  auto call = ParseAnthropicCall(json::parse(R"({"type": "tool_use", "id": "toolu_01A",
      "name": "computer", "input": {"action": "left_click", "coordinate": [1, 2]}})"));
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->tool_use_id, "toolu_01A");
  EXPECT_EQ(call->input, json::parse(R"({"action": "left_click", "coordinate": [1, 2]})"));
  EXPECT_EQ(Anthropic(json::parse(R"({"type": "tool_use", "id": "toolu_01A",
      "input": {"action": "left_click", "coordinate": [1, 2]}})"),
                      kScreen),
            "click at=1,2");
}

TEST(AnthropicCall, ToolUseBlockWithoutIdHasEmptyId) {
  auto call = ParseAnthropicCall(
      json::parse(R"({"type": "tool_use", "id": null, "input": {"action": "screenshot"}})"));
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->tool_use_id, "");
  EXPECT_EQ(call->input, json::parse(R"({"action": "screenshot"})"));
}

TEST(AnthropicCall, BareInputIsTheInput) {
  json body = json::parse(R"({"action": "key", "text": "Return"})");
  auto call = ParseAnthropicCall(body);
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->tool_use_id, "");
  EXPECT_EQ(call->input, body);
}

// A body whose type is not "tool_use" is a bare input: its members are the tool's parameters.
TEST(AnthropicCall, OtherTypeIsReadAsBareInput) {
  EXPECT_EQ(Anthropic(json::parse(R"({"type": "tool_result", "action": "screenshot"})"), kScreen),
            "unknown_field: unknown parameter 'type'");
}

TEST(Anthropic, StepOfAnActionHasNoCursorOrZoom) {
  auto step = ParseAnthropic(json::parse(R"({"action": "left_click"})"), kScreen);
  ASSERT_TRUE(step) << step.error().message;
  EXPECT_FALSE(step->cursor_position);
  EXPECT_FALSE(step->zoom);
  ASSERT_EQ(step->actions.size(), 1u);
}

TEST(Anthropic, ZoomRegionIsAScreenRect) {
  auto step =
      ParseAnthropic(json::parse(R"({"action": "zoom", "region": [100, 50, 300, 250]})"), kScaled);
  ASSERT_TRUE(step) << step.error().message;
  EXPECT_TRUE(step->actions.empty());
  EXPECT_FALSE(step->cursor_position);
  EXPECT_EQ(step->zoom, (vnc_bridge::Rect{125, 63, 250, 250}));
}

// Held modifiers arrive as keysyms, not as text: the typed action carries them apart.
TEST(Anthropic, ClickModifiersAreKeysyms) {
  auto step = ParseAnthropic(
      json::parse(R"({"action": "left_click", "coordinate": [1, 2], "text": "ctrl+alt"})"),
      kScreen);
  ASSERT_TRUE(step) << step.error().message;
  ASSERT_EQ(step->actions.size(), 1u);
  EXPECT_EQ(step->actions[0].modifiers,
            (std::vector<uint32_t>{vnc_bridge::kKeysymControlL, vnc_bridge::kKeysymAltL}));
  EXPECT_TRUE(step->actions[0].text.empty());
}

// 1.001 s is 1001 ms, though 1.001 * 1000 is 1000.9999999999999 in a double.
TEST(Anthropic, FractionalSecondsAreExactMilliseconds) {
  EXPECT_EQ(Anthropic(json::parse(R"({"action": "wait", "duration": 1.001})"), kScreen),
            "wait duration=1001ms");
}

}  // namespace
}  // namespace deskbox::computer_use::test
