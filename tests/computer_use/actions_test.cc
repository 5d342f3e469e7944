// Our own actions body (POST /v1/sandboxes/{id}/actions, docs/computer-use.md): every action
// type and its members, and the envelope (display, settle, screenshot).
#include "computer_use/actions.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;

// Rows are one action each; the body around it is {"actions": [row]}.
class ActionExample : public ::testing::TestWithParam<Case> {};

TEST_P(ActionExample, ParsesToItsAction) {
  json body = {{"actions", json::array({json::parse(GetParam().input)})}};
  EXPECT_EQ(Body(body, GetParam().display), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Pointer, ActionExample,
    ::testing::Values(
        Case{"Move", R"({"type": "move", "x": 100, "y": 50})", "move at=100,50"},
        Case{"MoveLastPixel", R"({"type": "move", "x": 1279, "y": 799})", "move at=1279,799"},
        Case{"ClickWherePointerIs", R"({"type": "click"})", "click"},
        Case{"ClickAt", R"({"type": "click", "x": 100, "y": 50})", "click at=100,50"},
        Case{"ClickEveryMember",
             R"({"type": "click", "x": 100, "y": 50, "button": "right", "count": 2,
                 "modifiers": "ctrl+shift"})",
             "click at=100,50 button=right count=2 mods=ffe3+ffe1"},
        Case{"ClickMiddle", R"({"type": "click", "x": 1, "y": 2, "button": "middle"})",
             "click at=1,2 button=middle"},
        Case{"ClickBack", R"({"type": "click", "x": 1, "y": 2, "button": "back"})",
             "click at=1,2 button=back"},
        Case{"ClickTenTimes", R"({"type": "click", "count": 10})", "click count=10"},
        Case{"ClickModifierList", R"({"type": "click", "modifiers": ["ctrl", "alt"]})",
             "click mods=ffe3+ffe9"},
        Case{"ClickNoModifiers", R"({"type": "click", "modifiers": ""})", "click"},
        Case{"ClickEmptyModifierList", R"({"type": "click", "modifiers": []})", "click"},
        Case{"ClickNullMembers", R"({"type": "click", "button": null, "count": null})", "click"},
        Case{"MouseDown", R"({"type": "mouse_down", "x": 10, "y": 20, "button": "right"})",
             "mouse_down at=10,20 button=right"},
        Case{"MouseDownWherePointerIs", R"({"type": "mouse_down"})", "mouse_down"},
        Case{"MouseUp", R"({"type": "mouse_up", "x": 10, "y": 20})", "mouse_up at=10,20"},
        Case{"MouseUpWherePointerIs", R"({"type": "mouse_up", "button": "middle"})",
             "mouse_up button=middle"},
        Case{"DragObjectPoints",
             R"({"type": "drag", "path": [{"x": 10, "y": 20}, {"x": 30, "y": 40}]})",
             "drag path=10,20;30,40"},
        Case{"DragPairPoints", R"({"type": "drag", "path": [[10, 20], [30, 40], [50, 60]]})",
             "drag path=10,20;30,40;50,60"},
        Case{"DragMixedPoints", R"({"type": "drag", "path": [[0, 0], {"y": 799, "x": 1279}]})",
             "drag path=0,0;1279,799"},
        Case{"DragButtonAndModifiers",
             R"({"type": "drag", "path": [[1, 2], [3, 4]], "button": "right",
                 "modifiers": ["shift"]})",
             "drag button=right path=1,2;3,4 mods=ffe1"}),
    CaseName);

INSTANTIATE_TEST_SUITE_P(
    ScrollKeysWait, ActionExample,
    ::testing::Values(
        Case{"ScrollWherePointerIs", R"({"type": "scroll", "dy": 3})", "scroll dy=3"},
        Case{"ScrollEveryMember",
             R"({"type": "scroll", "x": 5, "y": 6, "dx": -2, "dy": 100, "modifiers": "ctrl"})",
             "scroll at=5,6 dx=-2 dy=100 mods=ffe3"},
        Case{"ScrollLeftMost", R"({"type": "scroll", "dx": -100})", "scroll dx=-100"},
        Case{"Type", R"({"type": "type", "text": "héllo\n"})", "type text=\"héllo\n\""},
        Case{"TypeEmpty", R"({"type": "type", "text": ""})", "type"},
        Case{"KeyCombo", R"({"type": "key", "keys": "ctrl+shift+t"})", "key keys=ffe3+ffe1+54"},
        Case{"KeySequence", R"({"type": "key", "keys": "ctrl+a Delete"})", "key keys=ffe3+61 ffff"},
        Case{"KeyReturn", R"({"type": "key", "keys": "Return"})", "key keys=ff0d"},
        Case{"KeyF5", R"({"type": "key", "keys": "F5"})", "key keys=ffc2"},
        Case{"KeyCtrlPlus", R"({"type": "key", "keys": "ctrl++"})", "key keys=ffe3+2b"},
        Case{"KeyBeyondAscii", R"({"type": "key", "keys": "é"})", "key keys=e9"},
        Case{"KeyCodePoint", R"({"type": "key", "keys": "U+4E16"})", "key keys=1004e16"},
        Case{"KeyCtrlCodePoint", R"({"type": "key", "keys": "ctrl+U+00E9"})", "key keys=ffe3+e9"},
        Case{"KeyRawKeysym", R"({"type": "key", "keys": "0xff0d"})", "key keys=ff0d"},
        // Spaces alone are the space key.
        Case{"KeyOnlySpaces", R"({"type": "key", "keys": "   "})", "key keys=20"},
        Case{"KeyCaseInsensitive", R"({"type": "key", "keys": "PAGE_DOWN pagedown Page-Down"})",
             "key keys=ff56 ff56 ff56"},
        Case{"HoldKey", R"({"type": "hold_key", "keys": "shift", "duration_ms": 1500})",
             "hold_key keys=ffe1 duration=1500ms"},
        Case{"HoldKeyDefaultsTo500ms", R"({"type": "hold_key", "keys": "ctrl+alt"})",
             "hold_key keys=ffe3+ffe9 duration=500ms"},
        Case{"WaitDefaultsToOneSecond", R"({"type": "wait"})", "wait duration=1000ms"},
        Case{"Wait", R"({"type": "wait", "duration_ms": 250})", "wait duration=250ms"},
        Case{"WaitLongest", R"({"type": "wait", "duration_ms": 30000})", "wait duration=30000ms"}),
    CaseName);

TEST(Actions, SeveralInOrder) {
  EXPECT_EQ(Body(json::parse(R"({"actions": [{"type": "move", "x": 1, "y": 2},
      {"type": "click"}, {"type": "type", "text": "hi"}, {"type": "key", "keys": "Return"}]})"),
                 kScreen),
            "move at=1,2; click; type text=\"hi\"; key keys=ff0d");
}

// display 1024x640 over the 1280x800 screen, as a string or an object: every point of the body
// maps to floor((x + 0.5) * 1.25), floor((y + 0.5) * 1.25).
TEST(Actions, DisplayStringScalesEveryPoint) {
  EXPECT_EQ(Body(json::parse(R"({"display": "1024x640", "actions": [
      {"type": "move", "x": 100, "y": 50},
      {"type": "click", "x": 1023, "y": 639},
      {"type": "drag", "path": [[10, 20], {"x": 300, "y": 200}]},
      {"type": "scroll", "x": 0, "y": 0, "dy": 1}]})"),
                 kScreen),
            "move at=125,63; click at=1279,799; drag path=13,25;375,250; scroll at=0,0 dy=1");
}

TEST(Actions, DisplayObjectScalesEveryPoint) {
  EXPECT_EQ(Body(json::parse(R"({"display": {"width": 1024, "height": 640}, "actions": [
      {"type": "mouse_down", "x": 100, "y": 50}, {"type": "mouse_up", "x": 512, "y": 320}]})"),
                 kScreen),
            "mouse_down at=125,63; mouse_up at=640,400");
}

TEST(Actions, DisplayLargerThanScreen) {
  EXPECT_EQ(Body(json::parse(R"({"display": "1920x1200", "actions": [
      {"type": "move", "x": 960, "y": 600}, {"type": "move", "x": 1919, "y": 1199}]})"),
                 kScreen),
            "move at=640,400; move at=1279,799");
}

TEST(ActionsRequest, Defaults) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{"type": "wait"}]})"));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_EQ(req->actions, json::parse(R"([{"type": "wait"}])"));
  EXPECT_FALSE(req->display);
  ASSERT_TRUE(req->settle);
  EXPECT_EQ(req->settle->quiet, milliseconds(200));
  EXPECT_EQ(req->settle->timeout, milliseconds(5000));
  EXPECT_EQ(req->settle->no_change, milliseconds(2000));
  EXPECT_FALSE(req->screenshot);
}

TEST(ActionsRequest, NullMembersAreAbsent) {
  auto req = ParseActionsRequest(json::parse(
      R"({"actions": [{"type": "wait"}], "display": null, "settle": null, "screenshot": null})"));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_FALSE(req->display);
  EXPECT_TRUE(req->settle);
  EXPECT_FALSE(req->screenshot);
}

TEST(ActionsRequest, DisplayString) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{}], "display": "1024x640"})"));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_EQ(req->display, (DisplaySize{1024, 640}));
}

TEST(ActionsRequest, DisplayObject) {
  auto req = ParseActionsRequest(
      json::parse(R"({"actions": [{}], "display": {"width": 800, "height": 600}})"));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_EQ(req->display, (DisplaySize{800, 600}));
}

TEST(ActionsRequest, SettleTrueIsTheDefault) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{}], "settle": true})"));
  ASSERT_TRUE(req) << req.error().message;
  ASSERT_TRUE(req->settle);
  EXPECT_EQ(req->settle->quiet, milliseconds(200));
  EXPECT_EQ(req->settle->timeout, milliseconds(5000));
  EXPECT_EQ(req->settle->no_change, milliseconds(2000));
}

TEST(ActionsRequest, SettleFalseTurnsItOff) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{}], "settle": false})"));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_FALSE(req->settle);
}

TEST(ActionsRequest, SettleObjectTunesIt) {
  auto req = ParseActionsRequest(json::parse(
      R"({"actions": [{}], "settle": {"quiet_ms": 5000, "timeout_ms": 30000, "no_change_ms": 0}})"));
  ASSERT_TRUE(req) << req.error().message;
  ASSERT_TRUE(req->settle);
  EXPECT_EQ(req->settle->quiet, milliseconds(5000));
  EXPECT_EQ(req->settle->timeout, milliseconds(30000));
  EXPECT_EQ(req->settle->no_change, milliseconds(0));
}

TEST(ActionsRequest, SettleObjectKeepsWhatItDoesNotName) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{}], "settle": {"quiet_ms": 50}})"));
  ASSERT_TRUE(req) << req.error().message;
  ASSERT_TRUE(req->settle);
  EXPECT_EQ(req->settle->quiet, milliseconds(50));
  EXPECT_EQ(req->settle->timeout, milliseconds(5000));
  EXPECT_EQ(req->settle->no_change, milliseconds(2000));
}

TEST(ActionsRequest, ScreenshotTrueIsPngAt80) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{}], "screenshot": true})"));
  ASSERT_TRUE(req) << req.error().message;
  ASSERT_TRUE(req->screenshot);
  EXPECT_EQ(req->screenshot->format, ImageFormat::kPng);
  EXPECT_EQ(req->screenshot->quality, 80);
  EXPECT_EQ(req->screenshot->width, 0u);
  EXPECT_EQ(req->screenshot->height, 0u);
}

TEST(ActionsRequest, ScreenshotFalseIsNone) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{}], "screenshot": false})"));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_FALSE(req->screenshot);
}

TEST(ActionsRequest, ScreenshotObject) {
  auto req = ParseActionsRequest(
      json::parse(R"({"actions": [{}], "screenshot": {"format": "jpeg", "quality": 75}})"));
  ASSERT_TRUE(req) << req.error().message;
  ASSERT_TRUE(req->screenshot);
  EXPECT_EQ(req->screenshot->format, ImageFormat::kJpeg);
  EXPECT_EQ(req->screenshot->quality, 75);
}

TEST(ActionsRequest, EmptyScreenshotObjectIsPngAt80) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{}], "screenshot": {}})"));
  ASSERT_TRUE(req) << req.error().message;
  ASSERT_TRUE(req->screenshot);
  EXPECT_EQ(req->screenshot->format, ImageFormat::kPng);
  EXPECT_EQ(req->screenshot->quality, 80);
}

TEST(ActionsRequest, HundredActions) {
  json body = {{"actions", json::array()}};
  for (int i = 0; i < 100; ++i) body["actions"].push_back({{"type", "wait"}});
  auto req = ParseActionsRequest(body);
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_EQ(req->actions.size(), 100u);
}

// The envelope leaves the actions unread: a bad action is ParseActions' to report.
TEST(ActionsRequest, ActionsAreNotReadYet) {
  auto req = ParseActionsRequest(json::parse(R"({"actions": [{"type": "jump"}, 5]})"));
  ASSERT_TRUE(req) << req.error().message;
  EXPECT_EQ(req->actions.size(), 2u);
}

TEST(ParseAction, IndexNamesIt) {
  auto a = ParseAction(json::parse(R"({"type": "move"})"), 41, kScreen);
  ASSERT_FALSE(a);
  EXPECT_EQ(Outcome(a.error()), "missing_field: actions[41].x and actions[41].y are required");
}

TEST(ParseAction, TypedFields) {
  auto a =
      ParseAction(json::parse(R"({"type": "click", "x": 3, "y": 4, "button": "back", "count": 3})"),
                  0, kScreen);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_EQ(a->type, vnc_bridge::Action::Type::kClick);
  ASSERT_TRUE(a->at);
  EXPECT_EQ(a->at->x, 3u);
  EXPECT_EQ(a->at->y, 4u);
  EXPECT_EQ(a->button, vnc_bridge::MouseButton::kBack);
  EXPECT_EQ(a->count, 3);
}

// Null counts as absent (members.h): a click with x and y null is a click where the pointer is.
TEST(ParseAction, NullPointIsAbsent) {
  EXPECT_EQ(Body(json::parse(R"({"actions": [{"type": "click", "x": null, "y": null}]})"), kScreen),
            "click");
  EXPECT_EQ(Body(json::parse(R"({"actions": [{"type": "scroll", "x": null, "y": null,
                                              "dy": 1}]})"),
                 kScreen),
            "scroll dy=1");
}

}  // namespace
}  // namespace deskbox::computer_use::test
