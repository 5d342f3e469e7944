// OpenAI computer_call items (Responses API): every action type of the schema, the typed action it
// becomes, and the item around it (call_id, action or actions).
#include "computer_use/openai.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;

class OpenAiExample : public ::testing::TestWithParam<Case> {};

// Each row is a bare action; the same action inside a computer_call item is tested below.
TEST_P(OpenAiExample, ParsesToItsAction) {
  EXPECT_EQ(OpenAi(json::parse(GetParam().input), GetParam().display), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Clicks, OpenAiExample,
    ::testing::Values(
        Case{"ClickLeft", R"({"type": "click", "x": 100, "y": 50, "button": "left"})",
             "click at=100,50"},
        Case{"ClickRight", R"({"type": "click", "x": 100, "y": 50, "button": "right"})",
             "click at=100,50 button=right"},
        // The wheel is the middle button.
        Case{"ClickWheel", R"({"type": "click", "x": 100, "y": 50, "button": "wheel"})",
             "click at=100,50 button=middle"},
        Case{"ClickMiddle", R"({"type": "click", "x": 100, "y": 50, "button": "middle"})",
             "click at=100,50 button=middle"},
        Case{"ClickBack", R"({"type": "click", "x": 100, "y": 50, "button": "back"})",
             "click at=100,50 button=back"},
        Case{"ClickWithoutButtonIsLeft", R"({"type": "click", "x": 100, "y": 50})",
             "click at=100,50"},
        Case{"ClickButtonNotAStringIsLeft", R"({"type": "click", "x": 1, "y": 2, "button": 3})",
             "click at=1,2"},
        Case{"DoubleClick", R"({"type": "double_click", "x": 100, "y": 50})",
             "click at=100,50 count=2"},
        Case{"Move", R"({"type": "move", "x": 1279, "y": 799})", "move at=1279,799"},
        Case{"Drag", R"({"type": "drag", "path": [{"x": 10, "y": 20}, {"x": 30, "y": 40},
                                                 {"x": 50, "y": 60}]})",
             "drag path=10,20;30,40;50,60"},
        Case{"Screenshot", R"({"type": "screenshot"})", "(no action)"}),
    CaseName);

// Keysyms: ctrl ffe3, shift ffe1, alt ffe9, Return ff0d, Escape ff1b, Left ff51, F4 ffc1.
INSTANTIATE_TEST_SUITE_P(
    Keypress, OpenAiExample,
    ::testing::Values(
        Case{"Enter", R"({"type": "keypress", "keys": ["ENTER"]})", "key keys=ff0d"},
        Case{"Esc", R"({"type": "keypress", "keys": ["ESC"]})", "key keys=ff1b"},
        Case{"ArrowLeft", R"({"type": "keypress", "keys": ["ARROWLEFT"]})", "key keys=ff51"},
        Case{"Space", R"({"type": "keypress", "keys": ["SPACE"]})", "key keys=20"},
        // Keys of one keypress are pressed together: one combo.
        Case{"CtrlA", R"({"type": "keypress", "keys": ["CTRL", "A"]})", "key keys=ffe3+41"},
        Case{"CtrlLowerA", R"({"type": "keypress", "keys": ["CTRL", "a"]})", "key keys=ffe3+61"},
        Case{"ShiftArrowLeft", R"({"type": "keypress", "keys": ["SHIFT", "ARROWLEFT"]})",
             "key keys=ffe1+ff51"},
        Case{"AltF4", R"({"type": "keypress", "keys": ["ALT", "F4"]})", "key keys=ffe9+ffc1"},
        Case{"Slash", R"({"type": "keypress", "keys": ["/"]})", "key keys=2f"},
        Case{"Plus", R"({"type": "keypress", "keys": ["CTRL", "+"]})", "key keys=ffe3+2b"},
        Case{"EightKeys",
             R"({"type": "keypress", "keys": ["a", "b", "c", "d", "e", "f", "g", "h"]})",
             "key keys=61+62+63+64+65+66+67+68"}),
    CaseName);

// 100 px per wheel step, to the nearest step, at least one for any non-zero amount.
INSTANTIATE_TEST_SUITE_P(
    Scroll, OpenAiExample,
    ::testing::Values(
        Case{"Down300", R"({"type": "scroll", "x": 100, "y": 50, "scroll_x": 0, "scroll_y": 300})",
             "scroll at=100,50 dy=3"},
        Case{"Up300", R"({"type": "scroll", "x": 100, "y": 50, "scroll_x": 0, "scroll_y": -300})",
             "scroll at=100,50 dy=-3"},
        Case{"OnePixelIsOneStep", R"({"type": "scroll", "x": 0, "y": 0, "scroll_y": 1})",
             "scroll at=0,0 dy=1"},
        Case{"MinusOnePixel", R"({"type": "scroll", "x": 0, "y": 0, "scroll_y": -1})",
             "scroll at=0,0 dy=-1"},
        Case{"Pixels149RoundDown", R"({"type": "scroll", "x": 0, "y": 0, "scroll_y": 149})",
             "scroll at=0,0 dy=1"},
        Case{"Pixels150RoundUp", R"({"type": "scroll", "x": 0, "y": 0, "scroll_y": 150})",
             "scroll at=0,0 dy=2"},
        Case{"MinusPixels250", R"({"type": "scroll", "x": 0, "y": 0, "scroll_y": -250})",
             "scroll at=0,0 dy=-3"},
        Case{"Right120", R"({"type": "scroll", "x": 0, "y": 0, "scroll_x": 120})",
             "scroll at=0,0 dx=1"},
        Case{"Left", R"({"type": "scroll", "x": 0, "y": 0, "scroll_x": -700, "scroll_y": 0})",
             "scroll at=0,0 dx=-7"},
        Case{"BothAxes", R"({"type": "scroll", "x": 5, "y": 6, "scroll_x": -100, "scroll_y": 200})",
             "scroll at=5,6 dx=-1 dy=2"},
        Case{"MostPixels", R"({"type": "scroll", "x": 0, "y": 0, "scroll_y": 10049})",
             "scroll at=0,0 dy=100"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    TypeWait, OpenAiExample,
    ::testing::Values(
        Case{"Type", R"({"type": "type", "text": "hello world"})", "type text=\"hello world\""},
        Case{"TypeUnicode", R"({"type": "type", "text": "naïve 世界\n"})",
             "type text=\"naïve 世界\n\""},
        Case{"WaitDefaultsToTwoSeconds", R"({"type": "wait"})", "wait duration=2000ms"},
        Case{"WaitDurationMs", R"({"type": "wait", "duration_ms": 500})", "wait duration=500ms"},
        Case{"WaitZero", R"({"type": "wait", "duration_ms": 0})", "wait"},
        Case{"WaitLongest", R"({"type": "wait", "duration_ms": 30000})", "wait duration=30000ms"}),
    CaseName);

// display 1024x640 over 1280x800: (x, y) → (floor((x + 0.5) * 1.25), floor((y + 0.5) * 1.25)).
INSTANTIATE_TEST_SUITE_P(
    Scaled, OpenAiExample,
    ::testing::Values(
        Case{"Click", R"({"type": "click", "x": 100, "y": 50, "button": "left"})",
             "click at=125,63", kScaled},
        Case{"LastPixel", R"({"type": "move", "x": 1023, "y": 639})", "move at=1279,799", kScaled},
        Case{"Drag", R"({"type": "drag", "path": [{"x": 10, "y": 20}, {"x": 300, "y": 200}]})",
             "drag path=13,25;375,250", kScaled},
        Case{"Scroll", R"({"type": "scroll", "x": 512, "y": 320, "scroll_y": 100})",
             "scroll at=640,400 dy=1", kScaled},
        Case{"LargerDisplay", R"({"type": "double_click", "x": 960, "y": 600})",
             "click at=640,400 count=2", kLarger}),
    CaseName);

TEST(OpenAiCall, SingleActionCarriesCallId) {
  json body = json::parse(R"({"type": "computer_call", "id": "cu_1", "call_id": "call_abc",
      "action": {"type": "click", "x": 100, "y": 50, "button": "right"},
      "pending_safety_checks": [{"id": "cu_sc_1", "code": "malicious_instructions"}],
      "status": "completed"})");
  auto call = ParseOpenAiCall(body);
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->call_id, "call_abc");
  EXPECT_FALSE(call->listed);
  ASSERT_EQ(call->actions.size(), 1u);
  EXPECT_EQ(call->actions[0], body["action"]);
  EXPECT_EQ(OpenAi(body, kScreen), "click at=100,50 button=right");
}

// `actions` run in order; a screenshot among them is no action and has no params entry.
TEST(OpenAiCall, ActionsListInOrderWithoutScreenshots) {
  json body = json::parse(R"({"type": "computer_call", "call_id": "call_2", "actions": [
      {"type": "move", "x": 1, "y": 2},
      {"type": "screenshot"},
      {"type": "keypress", "keys": ["CTRL", "C"]},
      {"type": "wait"}]})");
  auto call = ParseOpenAiCall(body);
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->call_id, "call_2");
  EXPECT_TRUE(call->listed);
  ASSERT_EQ(call->actions.size(), 4u);
  auto step = ParseOpenAiActions(*call, kScreen);
  ASSERT_TRUE(step) << step.error().message;
  EXPECT_EQ(Lines(step->actions), "move at=1,2; key keys=ffe3+43; wait duration=2000ms");
  EXPECT_EQ(step->params,
            json::array({body["actions"][0], body["actions"][2], body["actions"][3]}));
}

// `actions` wins over `action` when an item has both.
TEST(OpenAiCall, ActionsListBeforeSingleAction) {
  auto call = ParseOpenAiCall(json::parse(R"({"type": "computer_call",
      "action": {"type": "wait"}, "actions": [{"type": "move", "x": 3, "y": 4}]})"));
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_TRUE(call->listed);
  EXPECT_EQ(call->call_id, "");
  auto step = ParseOpenAiActions(*call, kScreen);
  ASSERT_TRUE(step) << step.error().message;
  EXPECT_EQ(Lines(step->actions), "move at=3,4");
}

TEST(OpenAiCall, BareActionIsTheOnlyAction) {
  json body = json::parse(R"({"type": "type", "text": "hi"})");
  auto call = ParseOpenAiCall(body);
  ASSERT_TRUE(call) << call.error().message;
  EXPECT_EQ(call->call_id, "");
  EXPECT_FALSE(call->listed);
  ASSERT_EQ(call->actions.size(), 1u);
  EXPECT_EQ(call->actions[0], body);
}

TEST(OpenAiCall, ScreenshotOnlyCallHasNoActions) {
  auto call = ParseOpenAiCall(json::parse(
      R"({"type": "computer_call", "call_id": "c", "action": {"type": "screenshot"}})"));
  ASSERT_TRUE(call) << call.error().message;
  auto step = ParseOpenAiActions(*call, kScreen);
  ASSERT_TRUE(step) << step.error().message;
  EXPECT_TRUE(step->actions.empty());
  EXPECT_EQ(step->params, json::array());
}

TEST(OpenAiCall, HundredActionsAreAccepted) {
  json body = {{"type", "computer_call"}, {"actions", json::array()}};
  for (int i = 0; i < 100; ++i) body["actions"].push_back({{"type", "wait"}, {"duration_ms", i}});
  auto call = ParseOpenAiCall(body);
  ASSERT_TRUE(call) << call.error().message;
  auto step = ParseOpenAiActions(*call, kScreen);
  ASSERT_TRUE(step) << step.error().message;
  ASSERT_EQ(step->actions.size(), 100u);
  EXPECT_EQ(step->actions[99].duration, std::chrono::milliseconds(99));
}

TEST(OpenAiAction, PathNamesItInErrors) {
  auto a = ParseOpenAiAction(json::parse(R"({"type": "fly"})"), kScreen, "actions[7]");
  ASSERT_FALSE(a);
  EXPECT_EQ(Outcome(a.error()), "unknown_action: actions[7].type: unknown action 'fly'");
}

TEST(OpenAiAction, ScreenshotIsNoAction) {
  auto a = ParseOpenAiAction(json::parse(R"({"type": "screenshot"})"), kScreen, "action");
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_FALSE(*a);
}

}  // namespace
}  // namespace deskbox::computer_use::test
