// The display contract (docs/computer-use.md): a display point lands on the centre of the screen
// pixels it covers, floor((x + 0.5) * screen / display); the pointer comes back in the display;
// declared sizes are "WxH" or {"width", "height"}; images keep the display's aspect ratio.
#include "computer_use/display.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "computer_use/image_request.h"
#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using nlohmann::json;
using vnc_bridge::Point;

std::string At(Point p) {
  return std::to_string(p.x) + "," + std::to_string(p.y);
}

// The documented rule in integers: floor((2x + 1) * screen / (2 * display)), kept on the screen.
uint32_t ExactScreen(uint32_t x, uint32_t screen, uint32_t display) {
  return static_cast<uint32_t>(
      std::min<uint64_t>(screen - 1, (2 * uint64_t{x} + 1) * screen / (2 * uint64_t{display})));
}

TEST(DisplayOver, WithoutDeclarationIsTheScreen) {
  Display d = DisplayOver(std::nullopt, 1280, 800);
  EXPECT_EQ(d.width, 0u);
  EXPECT_EQ(d.w(), 1280u);
  EXPECT_EQ(d.h(), 800u);
  EXPECT_EQ(d.sx(), 1.0);
  EXPECT_EQ(d.sy(), 1.0);
}

TEST(DisplayOver, Declared) {
  Display d = DisplayOver(DisplaySize{1024, 640}, 1280, 800);
  EXPECT_EQ(d.w(), 1024u);
  EXPECT_EQ(d.h(), 640u);
  EXPECT_EQ(d.screen_w, 1280u);
  EXPECT_EQ(d.screen_h, 800u);
  EXPECT_EQ(d.sx(), 1.25);
  EXPECT_EQ(d.sy(), 1.25);
}

TEST(ToScreen, Examples) {
  EXPECT_EQ(At(kScaled.ToScreen(100, 50)), "125,63");
  EXPECT_EQ(At(kScaled.ToScreen(0, 0)), "0,0");
  EXPECT_EQ(At(kScaled.ToScreen(1, 1)), "1,1");
  EXPECT_EQ(At(kScaled.ToScreen(1023, 639)), "1279,799");
  EXPECT_EQ(At(kScreen.ToScreen(0, 0)), "0,0");
  EXPECT_EQ(At(kScreen.ToScreen(1279, 799)), "1279,799");
  EXPECT_EQ(At(kLarger.ToScreen(960, 600)), "640,400");
  EXPECT_EQ(At(kLarger.ToScreen(1919, 1199)), "1279,799");
  // One display pixel over a whole screen: its centre.
  EXPECT_EQ(At(Display{1, 1, 1280, 800}.ToScreen(0, 0)), "640,400");
  EXPECT_EQ(At(Display{0, 0, 1, 1}.ToScreen(0, 0)), "0,0");
}

// Every display pixel, at scales of common sizes (1.25, 2/3, 1.5, 0.8): the documented rule.
TEST(ToScreen, FollowsTheRuleOnEveryPixel) {
  const Display displays[] = {kScaled, kLarger, {1280, 800, 1920, 1200}, {1280, 1000, 1024, 800}};
  for (const Display& d : displays) {
    for (uint32_t x = 0; x < d.w(); ++x)
      ASSERT_EQ(d.ToScreen(x, 0).x, ExactScreen(x, d.screen_w, d.w())) << d.w() << " x=" << x;
    for (uint32_t y = 0; y < d.h(); ++y)
      ASSERT_EQ(d.ToScreen(0, y).y, ExactScreen(y, d.screen_h, d.h())) << d.h() << " y=" << y;
  }
}

// 1680x1050 over a 1920x1080 screen: display y 52 is screen y floor(52.5 * 1080 / 1050) = 54,
// though the scale 1080 / 1050 in a double is just below 36/35 (53 if computed so).
TEST(ToScreen, FollowsTheRuleWhereTheScaleIsInexact) {
  Display d{1680, 1050, 1920, 1080};
  EXPECT_EQ(d.ToScreen(0, 52).y, 54u);
  for (uint32_t y = 0; y < d.h(); ++y)
    ASSERT_EQ(d.ToScreen(0, y).y, ExactScreen(y, d.screen_h, d.h())) << "y=" << y;
}

TEST(ToDisplay, Examples) {
  EXPECT_EQ(At(kScaled.ToDisplay({125, 63})), "100,50");
  EXPECT_EQ(At(kScaled.ToDisplay({0, 0})), "0,0");
  EXPECT_EQ(At(kScaled.ToDisplay({1279, 799})), "1023,639");
  EXPECT_EQ(At(kScreen.ToDisplay({1279, 799})), "1279,799");
  EXPECT_EQ(At(Display{1280, 800, 1920, 1200}.ToDisplay({960, 600})), "640,400");
  // Kept on the display: a one-pixel display over a screen.
  EXPECT_EQ(At(Display{1, 1, 1280, 800}.ToDisplay({1279, 799})), "0,0");
}

// A point given in display pixels comes back as itself (a mouse_move, then cursor_position):
// at scales 1, 1.5 and 2.
TEST(ToDisplay, RoundTripsAtWholeAndHalfScales) {
  const Display displays[] = {kScreen, {1280, 800, 1920, 1200}, {640, 400, 1280, 800}};
  for (const Display& d : displays)
    for (uint32_t x = 0; x < d.w(); ++x) {
      Point p = d.ToDisplay(d.ToScreen(x, x % d.h()));
      ASSERT_EQ(At(p), At({x, x % d.h()})) << d.w() << "x" << d.h();
    }
}

// With 1.25 screen pixels per display pixel, display x 1 lands on screen x 1 (floor(1.5 * 1.25));
// mapped back by its left edge, floor(1 / 1.25) = 0, a mouse_move to [1, 1] would answer
// cursor_position "X=0,Y=0". By the centre of the screen pixel, every point comes back as given.
TEST(ToDisplay, RoundTripsOverAFractionalScale) {
  EXPECT_EQ(At(kScaled.ToDisplay(kScaled.ToScreen(1, 1))), "1,1");
  for (uint32_t x = 0; x < kScaled.w(); ++x)
    ASSERT_EQ(kScaled.ToDisplay(kScaled.ToScreen(x, 0)).x, x) << "x=" << x;
}

TEST(DisplayJson, Declared) {
  EXPECT_EQ(kScaled.ToJson().dump(),
            R"({"height":640,"scale_x":1.25,"scale_y":1.25,"width":1024})");
}

TEST(DisplayJson, ScreenItself) {
  EXPECT_EQ(kScreen.ToJson().dump(), R"({"height":800,"scale_x":1.0,"scale_y":1.0,"width":1280})");
}

TEST(DisplayJson, LargerThanScreen) {
  json j = kLarger.ToJson();
  EXPECT_EQ(j["width"], 1920);
  EXPECT_EQ(j["height"], 1200);
  EXPECT_DOUBLE_EQ(j["scale_x"].get<double>(), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(j["scale_y"].get<double>(), 2.0 / 3.0);
}

std::string Size(const std::expected<DisplaySize, Error>& s) {
  if (!s) return Outcome(s.error());
  return std::to_string(s->width) + "x" + std::to_string(s->height);
}

TEST(ParseSize, Accepted) {
  EXPECT_EQ(Size(ParseSize("1024x640")), "1024x640");
  EXPECT_EQ(Size(ParseSize("1x1")), "1x1");
  EXPECT_EQ(Size(ParseSize("4096x4096")), "4096x4096");
  EXPECT_EQ(Size(ParseSize("01280x00800")), "1280x800");
}

TEST(ParseSize, Refused) {
  const std::string sides = "bad_display: display must be WIDTHxHEIGHT with sides 1 to 4096 ";
  EXPECT_EQ(Size(ParseSize("0x5")), sides + "(got '0x5')");
  EXPECT_EQ(Size(ParseSize("5x0")), sides + "(got '5x0')");
  EXPECT_EQ(Size(ParseSize("99999x1")), sides + "(got '99999x1')");
  EXPECT_EQ(Size(ParseSize("4097x1")), sides + "(got '4097x1')");
  EXPECT_EQ(Size(ParseSize("100000x1")), sides + "(got '100000x1')");
  EXPECT_EQ(Size(ParseSize("x640")), sides + "(got 'x640')");
  EXPECT_EQ(Size(ParseSize("1024x")), sides + "(got '1024x')");
  EXPECT_EQ(Size(ParseSize("-1x5")), sides + "(got '-1x5')");
  EXPECT_EQ(Size(ParseSize(" 1024x640")), sides + "(got ' 1024x640')");
  EXPECT_EQ(Size(ParseSize("1024x640x1")), sides + "(got '1024x640x1')");
  EXPECT_EQ(Size(ParseSize("12")), "bad_display: display must be WIDTHxHEIGHT (got '12')");
  EXPECT_EQ(Size(ParseSize("")), "bad_display: display must be WIDTHxHEIGHT (got '')");
  // Only a lower-case x separates the sides.
  EXPECT_EQ(Size(ParseSize("1024X640")),
            "bad_display: display must be WIDTHxHEIGHT (got '1024X640')");
  // The text is cut to 32 bytes in the message.
  EXPECT_EQ(Size(ParseSize(std::string(40, '7'))),
            "bad_display: display must be WIDTHxHEIGHT (got '" + std::string(32, '7') + "')");
}

TEST(ParseDisplay, StringAndObject) {
  EXPECT_EQ(Size(ParseDisplay("1024x640")), "1024x640");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": 1024, "height": 640})"))), "1024x640");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": 4096, "height": 1})"))), "4096x1");
}

TEST(ParseDisplay, Refused) {
  EXPECT_EQ(Size(ParseDisplay("0x5")),
            "bad_display: display must be WIDTHxHEIGHT with sides 1 to 4096 (got '0x5')");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": 1024, "height": 640, "dpi": 96})"))),
            "bad_display: unknown field 'display.dpi'");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": 0, "height": 640})"))),
            "bad_display: display.width must be between 1 and 4096 (got 0)");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": 1024, "height": 4097})"))),
            "bad_display: display.height must be between 1 and 4096 (got 4097)");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": "1024", "height": 640})"))),
            "bad_display: display.width must be an integer");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": 1024})"))),
            "bad_display: display needs width and height");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"({"width": 1024, "height": null})"))),
            "bad_display: display needs width and height");
  EXPECT_EQ(Size(ParseDisplay(json::parse(R"([1024, 640])"))),
            "bad_display: display must be \"WIDTHxHEIGHT\" or {\"width\", \"height\"}");
  EXPECT_EQ(Size(ParseDisplay(json(true))),
            "bad_display: display must be \"WIDTHxHEIGHT\" or {\"width\", \"height\"}");
}

std::string Rendered(ImageRequest r, const Display& d) {
  DisplaySize s = ImageSize(r, d);
  return std::to_string(s.width) + "x" + std::to_string(s.height);
}

TEST(ImageSize, WithoutSizeIsTheDisplay) {
  EXPECT_EQ(Rendered({}, kScaled), "1024x640");
  EXPECT_EQ(Rendered({}, kScreen), "1280x800");
}

TEST(ImageSize, BothSidesAsGiven) {
  EXPECT_EQ(Rendered({.width = 300, .height = 900}, kScaled), "300x900");
}

// One side given: the other keeps the display's aspect ratio, rounded down, at least 1.
TEST(ImageSize, OneSideKeepsTheAspectRatio) {
  EXPECT_EQ(Rendered({.width = 512}, kScaled), "512x320");
  EXPECT_EQ(Rendered({.height = 320}, kScaled), "512x320");
  EXPECT_EQ(Rendered({.width = 333}, kScreen), "333x208");
  EXPECT_EQ(Rendered({.width = 1}, kScreen), "1x1");
  EXPECT_EQ(Rendered({.height = 1}, Display{0, 0, 4096, 1}), "4096x1");
  EXPECT_EQ(Rendered({.width = 1}, Display{0, 0, 4096, 1}), "1x1");
}

// A display with no pixels has no aspect ratio: the given side stays alone.
TEST(ImageSize, EmptyDisplay) {
  EXPECT_EQ(Rendered({.width = 100}, Display{}), "100x0");
}

TEST(ImageFormatNames, NamesAndMediaTypes) {
  EXPECT_EQ(ToString(ImageFormat::kPng), "png");
  EXPECT_EQ(ToString(ImageFormat::kJpeg), "jpeg");
  EXPECT_EQ(MediaType(ImageFormat::kPng), "image/png");
  EXPECT_EQ(MediaType(ImageFormat::kJpeg), "image/jpeg");
}

}  // namespace
}  // namespace deskbox::computer_use::test
