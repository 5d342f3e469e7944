#pragma once
// A typed action as one line ("click at=125,75 button=right count=2 mods=ffe1"), so that the
// tables of expected actions read like the inputs they come from. Members at their defaults are
// left out.
#include <fmt/format.h>

#include <string>

#include "computer_use/typing.h"
#include "vnc_bridge/input.h"

namespace deskbox::computer_use {

inline std::string Combo(const std::vector<uint32_t>& keys) {
  std::string out;
  for (uint32_t k : keys) out += fmt::format("{}{:x}", out.empty() ? "" : "+", k);
  return out;
}

inline std::string Describe(const vnc_bridge::Action& a) {
  namespace vb = vnc_bridge;
  std::string out = vb::ToString(a.type);
  if (a.at) out += fmt::format(" at={},{}", a.at->x, a.at->y);
  if (a.button != vb::MouseButton::kLeft)
    out += a.button == vb::MouseButton::kMiddle  ? " button=middle"
           : a.button == vb::MouseButton::kRight ? " button=right"
                                                 : " button=back";
  if (a.count != 1) out += fmt::format(" count={}", a.count);
  if (!a.path.empty()) {
    out += " path=";
    for (size_t i = 0; i < a.path.size(); ++i)
      out += fmt::format("{}{},{}", i ? ";" : "", a.path[i].x, a.path[i].y);
  }
  if (a.dx) out += fmt::format(" dx={}", a.dx);
  if (a.dy) out += fmt::format(" dy={}", a.dy);
  if (!a.text.empty()) out += " text=\"" + EncodeUtf8(a.text) + "\"";
  if (!a.keys.empty()) {
    out += " keys=";
    for (size_t i = 0; i < a.keys.size(); ++i) out += (i ? " " : "") + Combo(a.keys[i]);
  }
  if (!a.modifiers.empty()) out += " mods=" + Combo(a.modifiers);
  if (a.duration.count()) out += fmt::format(" duration={}ms", a.duration.count());
  return out;
}

}  // namespace deskbox::computer_use
