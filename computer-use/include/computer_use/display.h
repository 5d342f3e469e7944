#pragma once
// The display contract (docs/computer-use.md): a call may declare the display size its model
// works in; every coordinate it gives is in that display and lands on the centre of the screen
// pixels it covers, and what goes back (the pointer, screenshots) is in it too.
#include <cstdint>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "computer_use/error.h"
#include "vnc_bridge/mirror.h"

namespace deskbox::computer_use {

// A declared display size; both sides 1..vnc_bridge::kMaxScreenSide when parsed.
struct DisplaySize {
  uint32_t width = 0, height = 0;
  bool operator==(const DisplaySize&) const = default;
};

// The display a model works in, over the screen it maps onto.
struct Display {
  uint32_t width = 0, height = 0;  // 0: the screen's own size
  uint32_t screen_w = 0, screen_h = 0;

  // Screen pixels per display pixel.
  double sx() const { return width ? double(screen_w) / width : 1.0; }
  double sy() const { return height ? double(screen_h) / height : 1.0; }
  // The display's size in effect.
  uint32_t w() const { return width ? width : screen_w; }
  uint32_t h() const { return height ? height : screen_h; }
  // The centre of display pixel (x, y), on the screen: floor((x + 0.5) × sx), kept on the screen.
  vnc_bridge::Point ToScreen(uint32_t x, uint32_t y) const;
  // A screen point (the pointer) in display pixels: the display pixel holding the screen
  // pixel's centre, floor((x + 0.5) / sx), kept on the display.
  vnc_bridge::Point ToDisplay(vnc_bridge::Point p) const;
  // {"width", "height", "scale_x", "scale_y"}, as answers state it.
  nlohmann::json ToJson() const;
};

// The declared display (or, without one, the screen's own size) over a screen of that size.
Display DisplayOver(const std::optional<DisplaySize>& declared, uint32_t screen_w,
                    uint32_t screen_h);

// "1024x640" → its size (a query's `display`, or the string form of the member). kBadDisplay.
std::expected<DisplaySize, Error> ParseSize(std::string_view text);

// The value of a body's `display` member (present and not null): "WxH" or
// {"width": W, "height": H}. kBadDisplay.
std::expected<DisplaySize, Error> ParseDisplay(const nlohmann::json& value);

}  // namespace deskbox::computer_use
