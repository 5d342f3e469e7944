#include "computer_use/anthropic.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "checked_action.h"
#include "members.h"
#include "vnc_bridge/keys.h"

namespace deskbox::computer_use {

using internal::Fail;
using nlohmann::json;
namespace vb = vnc_bridge;

namespace {

bool Absent(const json& object, json::const_iterator it) {
  return it == object.end() || it->is_null();
}

std::expected<vb::Point, Error> ModelPoint(const json& v, const Display& d, const char* name) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
    return Fail(ErrorCode::kBadCoordinate, fmt::format("{} must be [x, y] (integers)", name));
  // Unsigned beyond int64 is off the display too; the message shows it as given.
  int64_t x = v[0].is_number_unsigned() && v[0].get<uint64_t>() > INT64_MAX ? -1 : v[0].get<int64_t>();
  int64_t y = v[1].is_number_unsigned() && v[1].get<uint64_t>() > INT64_MAX ? -1 : v[1].get<int64_t>();
  if (x < 0 || y < 0 || x >= d.w() || y >= d.h())
    return Fail(ErrorCode::kOutsideDisplay, fmt::format("{} [{}, {}] is outside the {}x{} display",
                                                        name, v[0].dump(), v[1].dump(), d.w(),
                                                        d.h()));
  return d.ToScreen(static_cast<uint32_t>(x), static_cast<uint32_t>(y));
}

// Newer tool versions hold modifier keys during a click or scroll: `text` is then a combo.
std::expected<std::vector<uint32_t>, Error> ModelModifiers(const json& input) {
  auto it = input.find("text");
  if (Absent(input, it)) return std::vector<uint32_t>{};
  if (!it->is_string()) return Fail(ErrorCode::kBadKey, "text (modifier keys) must be a string");
  if (it->get_ref<const std::string&>().empty()) return std::vector<uint32_t>{};
  auto keys = vb::ParseCombo(it->get_ref<const std::string&>());
  if (!keys) return Fail(ErrorCode::kBadKey, "text (modifier keys): " + keys.error().message);
  return *keys;
}

// `duration` is in seconds (a number, not necessarily whole).
std::expected<std::chrono::milliseconds, Error> ModelDuration(const json& input,
                                                              double fallback_s) {
  auto it = input.find("duration");
  double s = fallback_s;
  if (!Absent(input, it)) {
    if (!it->is_number())
      return Fail(ErrorCode::kBadDuration, "duration must be a number of seconds");
    s = it->get<double>();
  }
  if (!(s >= 0) || s * 1000 > vb::kMaxActionDuration.count())
    return Fail(ErrorCode::kBadDuration, fmt::format("duration must be between 0 and {} seconds",
                                                     vb::kMaxActionDuration.count() / 1000));
  return std::chrono::milliseconds(std::llround(s * 1000));
}

// zoom's region [x0, y0, x1, y1] in display pixels (x1, y1 exclusive), as a screen rectangle.
std::expected<vb::Rect, Error> ZoomRegion(const json& input, const Display& d) {
  auto r = input.find("region");
  if (r == input.end() || !r->is_array() || r->size() != 4)
    return Fail(ErrorCode::kBadRegion, "zoom needs region [x0, y0, x1, y1]");
  for (const auto& v : *r)
    if (!v.is_number_integer()) return Fail(ErrorCode::kBadRegion, "region must hold 4 integers");
  int64_t x0 = (*r)[0].get<int64_t>(), y0 = (*r)[1].get<int64_t>(), x1 = (*r)[2].get<int64_t>(),
          y1 = (*r)[3].get<int64_t>();
  if (x0 < 0 || y0 < 0 || x1 > d.w() || y1 > d.h() || x1 <= x0 || y1 <= y0)
    return Fail(ErrorCode::kBadRegion,
                fmt::format("region [{}, {}, {}, {}] must lie within the {}x{} display with x0 < "
                            "x1 and y0 < y1",
                            x0, y0, x1, y1, d.w(), d.h()));
  auto sx = [&](int64_t v) { return static_cast<uint32_t>(std::lround(v * d.sx())); };
  auto sy = [&](int64_t v) { return static_cast<uint32_t>(std::lround(v * d.sy())); };
  // At least one screen pixel, on the screen, however the display rounds.
  uint32_t X0 = std::min(sx(x0), d.screen_w - 1), Y0 = std::min(sy(y0), d.screen_h - 1);
  uint32_t X1 = std::clamp(sx(x1), X0 + 1, d.screen_w),
           Y1 = std::clamp(sy(y1), Y0 + 1, d.screen_h);
  return vb::Rect{X0, Y0, X1 - X0, Y1 - Y0};
}

json TextContent(std::string text) {
  return json::array({{{"type", "text"}, {"text", std::move(text)}}});
}

}  // namespace

std::expected<AnthropicCall, Error> ParseAnthropicCall(const json& body) {
  AnthropicCall call;
  const json* input = &body;
  if (body.is_object()) {
    auto type = body.find("type");
    if (type != body.end() && type->is_string() && type->get_ref<const std::string&>() == "tool_use") {
      auto it = body.find("input");
      if (it == body.end() || !it->is_object())
        return Fail(ErrorCode::kNotAnObject, "tool_use.input must be an object");
      input = &*it;
      auto id = body.find("id");
      if (!Absent(body, id)) {
        if (!id->is_string()) return Fail(ErrorCode::kWrongType, "tool_use.id must be a string");
        call.tool_use_id = id->get<std::string>();
      }
    }
  }
  if (!input->is_object())
    return Fail(ErrorCode::kNotAnObject,
                "the body must be the tool's input object (or a tool_use block)");
  call.input = *input;
  return call;
}

std::expected<AnthropicStep, Error> ParseAnthropic(const json& in, const Display& d) {
  using T = vb::Action::Type;
  if (!in.is_object())
    return Fail(ErrorCode::kNotAnObject,
                "the body must be the tool's input object (or a tool_use block)");
  static const std::set<std::string, std::less<>> kKnown = {
      "action",           "coordinate",    "start_coordinate", "text",
      "scroll_direction", "scroll_amount", "duration",         "region"};
  for (auto it = in.begin(); it != in.end(); ++it)
    if (!kKnown.count(it.key()))
      return Fail(ErrorCode::kUnknownField, fmt::format("unknown parameter '{}'", it.key()));
  auto action_it = in.find("action");
  if (Absent(in, action_it)) return Fail(ErrorCode::kMissingField, "action is required");
  if (!action_it->is_string()) return Fail(ErrorCode::kWrongType, "action is required");
  const std::string& action = action_it->get_ref<const std::string&>();
  // key and hold_key: the key or combo, xdotool-style.
  auto key_text = [&]() -> std::expected<std::string, Error> {
    auto t = in.find("text");
    if (Absent(in, t)) return Fail(ErrorCode::kMissingField, fmt::format("{} needs text", action));
    if (!t->is_string() || t->get_ref<const std::string&>().empty())
      return Fail(ErrorCode::kBadKey, fmt::format("{} needs text", action));
    return t->get<std::string>();
  };
  auto point = [&](const char* name,
                   bool required) -> std::expected<std::optional<vb::Point>, Error> {
    auto p = in.find(name);
    if (Absent(in, p)) {
      if (required)
        return Fail(ErrorCode::kMissingField, fmt::format("{} needs {}", action, name));
      return std::optional<vb::Point>{};
    }
    auto pt = ModelPoint(*p, d, name);
    if (!pt) return std::unexpected(pt.error());
    return std::optional<vb::Point>{*pt};
  };
  AnthropicStep step;
  vb::Action a;
  if (action == "screenshot") return step;
  if (action == "cursor_position") {
    step.cursor_position = true;
    return step;
  }
  if (action == "key" || action == "hold_key") {
    auto t = key_text();
    if (!t) return std::unexpected(t.error());
    if (action == "key") {
      auto seq = vb::ParseKeySequence(*t);
      if (!seq) return Fail(ErrorCode::kBadKey, seq.error().message);
      a.type = T::kKey;
      a.keys = std::move(*seq);
    } else {
      auto combo = vb::ParseCombo(*t);
      if (!combo) return Fail(ErrorCode::kBadKey, combo.error().message);
      auto dur = ModelDuration(in, 0.5);
      if (!dur) return std::unexpected(dur.error());
      a.type = T::kHoldKey;
      a.keys = {std::move(*combo)};
      a.duration = *dur;
    }
  } else if (action == "type") {
    auto t = in.find("text");
    if (Absent(in, t)) return Fail(ErrorCode::kMissingField, "type needs text");
    if (!t->is_string()) return Fail(ErrorCode::kBadText, "type needs text");
    auto cps = vb::DecodeUtf8(t->get_ref<const std::string&>());
    if (!cps) return Fail(ErrorCode::kBadText, cps.error().message);
    a.type = T::kType;
    a.text = std::move(*cps);
  } else if (action == "mouse_move") {
    auto p = point("coordinate", true);
    if (!p) return std::unexpected(p.error());
    a.type = T::kMove;
    a.at = **p;
  } else if (action == "left_mouse_down" || action == "left_mouse_up") {
    auto p = point("coordinate", false);
    if (!p) return std::unexpected(p.error());
    a.type = action == "left_mouse_down" ? T::kMouseDown : T::kMouseUp;
    a.at = *p;
  } else if (action == "left_click" || action == "right_click" || action == "middle_click" ||
             action == "double_click" || action == "triple_click") {
    auto p = point("coordinate", false);
    if (!p) return std::unexpected(p.error());
    auto mods = ModelModifiers(in);
    if (!mods) return std::unexpected(mods.error());
    a.type = T::kClick;
    a.at = *p;
    a.modifiers = std::move(*mods);
    a.button = action == "right_click"    ? vb::MouseButton::kRight
               : action == "middle_click" ? vb::MouseButton::kMiddle
                                          : vb::MouseButton::kLeft;
    a.count = action == "double_click" ? 2 : action == "triple_click" ? 3 : 1;
  } else if (action == "left_click_drag") {
    auto from = point("start_coordinate", true);
    if (!from) return std::unexpected(from.error());
    auto to = point("coordinate", true);
    if (!to) return std::unexpected(to.error());
    a.type = T::kDrag;
    a.path = {**from, **to};
  } else if (action == "scroll") {
    auto p = point("coordinate", false);
    if (!p) return std::unexpected(p.error());
    auto dir = in.find("scroll_direction");
    if (Absent(in, dir)) return Fail(ErrorCode::kMissingField, "scroll needs scroll_direction");
    if (!dir->is_string()) return Fail(ErrorCode::kBadScroll, "scroll needs scroll_direction");
    auto amount = in.find("scroll_amount");
    int64_t n = 3;
    if (!Absent(in, amount)) {
      if (!amount->is_number_integer())
        return Fail(ErrorCode::kBadScroll, "scroll_amount must be an integer");
      n = amount->get<int64_t>();
    }
    if (n < 1 || n > vb::kMaxScrollSteps)
      return Fail(ErrorCode::kBadScroll,
                  fmt::format("scroll_amount must be between 1 and {}", vb::kMaxScrollSteps));
    auto mods = ModelModifiers(in);
    if (!mods) return std::unexpected(mods.error());
    const std::string& direction = dir->get_ref<const std::string&>();
    a.type = T::kScroll;
    a.at = *p;
    a.modifiers = std::move(*mods);
    if (direction == "up")
      a.dy = -static_cast<int>(n);
    else if (direction == "down")
      a.dy = static_cast<int>(n);
    else if (direction == "left")
      a.dx = -static_cast<int>(n);
    else if (direction == "right")
      a.dx = static_cast<int>(n);
    else
      return Fail(ErrorCode::kBadScroll, "scroll_direction must be up, down, left or right");
  } else if (action == "wait") {
    auto dur = ModelDuration(in, 1.0);
    if (!dur) return std::unexpected(dur.error());
    a.type = T::kWait;
    a.duration = *dur;
  } else if (action == "zoom") {
    auto region = ZoomRegion(in, d);
    if (!region) return std::unexpected(region.error());
    step.zoom = *region;
    return step;
  } else {
    return Fail(ErrorCode::kUnknownAction,
                fmt::format("unknown action '{}'", action.substr(0, 64)));
  }
  if (auto ok = internal::CheckAction(a, d, ""); !ok) return std::unexpected(ok.error());
  step.actions.push_back(std::move(a));
  return step;
}

json AnthropicToolResult(json content, bool is_error, std::string_view tool_use_id) {
  json r = {{"type", "tool_result"}, {"content", std::move(content)}, {"is_error", is_error}};
  if (!tool_use_id.empty()) r["tool_use_id"] = tool_use_id;
  return r;
}

json AnthropicTextResult(std::string text, bool is_error, std::string_view tool_use_id) {
  return AnthropicToolResult(TextContent(std::move(text)), is_error, tool_use_id);
}

json AnthropicCursorResult(vb::Point p, std::string_view tool_use_id) {
  return AnthropicTextResult(fmt::format("X={},Y={}", p.x, p.y), false, tool_use_id);
}

json AnthropicImageResult(ImageFormat format, std::string base64, std::string_view tool_use_id) {
  json block = {{"type", "image"},
                {"source",
                 {{"type", "base64"}, {"media_type", MediaType(format)}, {"data", std::move(base64)}}}};
  return AnthropicToolResult(json::array({std::move(block)}), false, tool_use_id);
}

}  // namespace deskbox::computer_use
