#include "computer_use/display.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "members.h"
#include "vnc_bridge/rfb_client.h"

namespace deskbox::computer_use {

using internal::Classed;
using internal::Fail;
using nlohmann::json;
namespace vb = vnc_bridge;

// Both maps in integers: the scales (1080 / 1050, say) are not exact in floating point, and a
// coordinate must land where the documented rule puts it.
vb::Point Display::ToScreen(uint32_t x, uint32_t y) const {
  // floor((v + 0.5) × screen / display), kept on the screen.
  auto m = [](uint32_t v, uint32_t screen, uint32_t display) {
    uint64_t s = (2 * uint64_t{v} + 1) * screen / (2 * uint64_t{display});
    return static_cast<uint32_t>(std::min<uint64_t>(s, screen - 1));
  };
  return {m(x, screen_w, w()), m(y, screen_h, h())};
}

vb::Point Display::ToDisplay(vb::Point p) const {
  // The centre of the screen pixel, floor((v + 0.5) × display / screen), kept on the display: a
  // point ToScreen placed comes back as itself whenever the display is no larger than the screen.
  auto m = [](uint32_t v, uint32_t screen, uint32_t display) {
    uint64_t d = (2 * uint64_t{v} + 1) * display / (2 * uint64_t{screen});
    return static_cast<uint32_t>(std::min<uint64_t>(d, display - 1));
  };
  return {m(p.x, screen_w, w()), m(p.y, screen_h, h())};
}

json Display::ToJson() const {
  return {{"width", w()}, {"height", h()}, {"scale_x", sx()}, {"scale_y", sy()}};
}

Display DisplayOver(const std::optional<DisplaySize>& declared, uint32_t screen_w,
                    uint32_t screen_h) {
  return {declared ? declared->width : 0, declared ? declared->height : 0, screen_w, screen_h};
}

std::expected<DisplaySize, Error> ParseSize(std::string_view s) {
  auto x = s.find('x');
  auto side = [](std::string_view v) -> std::optional<uint32_t> {
    if (v.empty() || v.size() > 5 || v.find_first_not_of("0123456789") != std::string_view::npos)
      return std::nullopt;
    auto n = static_cast<uint32_t>(std::stoul(std::string(v)));
    if (n < 1 || n > vb::kMaxScreenSide) return std::nullopt;
    return n;
  };
  if (x == std::string_view::npos)
    return Fail(ErrorCode::kBadDisplay,
                fmt::format("display must be WIDTHxHEIGHT (got '{}')", s.substr(0, 32)));
  auto w = side(s.substr(0, x)), h = side(s.substr(x + 1));
  if (!w || !h)
    return Fail(ErrorCode::kBadDisplay,
                fmt::format("display must be WIDTHxHEIGHT with sides 1 to {} (got '{}')",
                            vb::kMaxScreenSide, s.substr(0, 32)));
  return DisplaySize{*w, *h};
}

std::expected<DisplaySize, Error> ParseDisplay(const json& value) {
  if (value.is_string()) return ParseSize(value.get_ref<const std::string&>());
  if (!value.is_object())
    return Fail(ErrorCode::kBadDisplay,
                "display must be \"WIDTHxHEIGHT\" or {\"width\", \"height\"}");
  internal::Members in(value, "display");
  auto w = Classed(ErrorCode::kBadDisplay, in.Integer("width", 1, vb::kMaxScreenSide));
  if (!w) return std::unexpected(w.error());
  auto h = Classed(ErrorCode::kBadDisplay, in.Integer("height", 1, vb::kMaxScreenSide));
  if (!h) return std::unexpected(h.error());
  if (auto done = Classed(ErrorCode::kBadDisplay, in.Finish()); !done)
    return std::unexpected(done.error());
  if (!*w || !*h) return Fail(ErrorCode::kBadDisplay, "display needs width and height");
  return DisplaySize{static_cast<uint32_t>(**w), static_cast<uint32_t>(**h)};
}

}  // namespace deskbox::computer_use
