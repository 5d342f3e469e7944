#include "computer_use/actions.h"

#include <fmt/format.h>

#include <string>

#include "checked_action.h"
#include "members.h"
#include "vnc_bridge/keys.h"

namespace deskbox::computer_use {

using internal::Classed;
using internal::Fail;
using internal::Members;
using nlohmann::json;
namespace vb = vnc_bridge;

namespace {

// A point given as the members x and y (both or neither), in display pixels, on the screen.
std::expected<std::optional<vb::Point>, Error> ReadPoint(Members& in, const Display& d,
                                                         bool required) {
  // Asked for even when null, which counts as absent (not an unknown member).
  bool hx = in.Any("x") != nullptr, hy = in.Any("y") != nullptr;
  if (!hx && !hy) {
    if (required)
      return Fail(ErrorCode::kMissingField, in.Name("x") + " and " + in.Name("y") + " are required");
    return std::nullopt;
  }
  if (hx != hy)
    return Fail(ErrorCode::kBadCoordinate, in.Name("x") + " and " + in.Name("y") + " go together");
  // A number that is no integer is a malformed point; an integer off the display is a miss.
  auto classed = [](Error e) {
    e.code = e.code == ErrorCode::kOutOfRange ? ErrorCode::kOutsideDisplay
                                              : ErrorCode::kBadCoordinate;
    return std::unexpected(std::move(e));
  };
  auto x = in.Integer("x", 0, d.w() - 1);
  if (!x) return classed(x.error());
  auto y = in.Integer("y", 0, d.h() - 1);
  if (!y) return classed(y.error());
  return d.ToScreen(static_cast<uint32_t>(**x), static_cast<uint32_t>(**y));
}

// A drag path's point: {"x": int, "y": int} or [x, y], in display pixels, on the screen.
std::expected<vb::Point, Error> PathPoint(const json& p, const Display& d,
                                          const std::string& where) {
  int64_t x = -1, y = -1;
  if (p.is_array() && p.size() == 2 && p[0].is_number_integer() && p[1].is_number_integer()) {
    x = p[0].get<int64_t>();
    y = p[1].get<int64_t>();
  } else if (p.is_object() && p.size() == 2 && p.contains("x") && p.contains("y") &&
             p["x"].is_number_integer() && p["y"].is_number_integer()) {
    x = p["x"].get<int64_t>();
    y = p["y"].get<int64_t>();
  } else {
    return Fail(ErrorCode::kBadCoordinate, where + " must be {\"x\": int, \"y\": int} or [x, y]");
  }
  if (x < 0 || y < 0 || x >= d.w() || y >= d.h())
    return Fail(ErrorCode::kOutsideDisplay, fmt::format("{} ({}, {}) is outside the {}x{} display",
                                                        where, x, y, d.w(), d.h()));
  return d.ToScreen(static_cast<uint32_t>(x), static_cast<uint32_t>(y));
}

// Keys held during a click, drag or scroll: a combo ("ctrl+shift") or a list of key names.
std::expected<std::vector<uint32_t>, Error> ReadModifiers(Members& in) {
  const json* m = in.Any("modifiers");
  if (!m) return std::vector<uint32_t>{};
  std::string combo;
  if (m->is_string()) {
    combo = m->get<std::string>();
  } else if (m->is_array() && m->size() <= 8) {
    for (const auto& k : *m) {
      if (!k.is_string())
        return Fail(ErrorCode::kBadKey,
                    in.Name("modifiers") + " must be a string or a list of key names");
      combo += (combo.empty() ? "" : "+") + k.get<std::string>();
    }
  } else {
    return Fail(ErrorCode::kBadKey,
                in.Name("modifiers") +
                    " must be a string (\"ctrl+shift\") or a list of at most 8 key names");
  }
  if (combo.empty()) return std::vector<uint32_t>{};
  auto keys = vb::ParseCombo(combo);
  if (!keys) return Fail(ErrorCode::kBadKey, in.Name("modifiers") + ": " + keys.error().message);
  return *keys;
}

std::expected<vb::MouseButton, Error> ReadButton(Members& in) {
  auto b = Classed(ErrorCode::kBadButton,
                   in.Enum("button", {"left", "middle", "right", "back"}, ErrorCode::kBadButton));
  if (!b) return std::unexpected(b.error());
  std::string name = b->value_or("left");
  if (name == "middle") return vb::MouseButton::kMiddle;
  if (name == "right") return vb::MouseButton::kRight;
  if (name == "back") return vb::MouseButton::kBack;
  return vb::MouseButton::kLeft;
}

std::expected<std::chrono::milliseconds, Error> ReadDurationMs(Members& in,
                                                               std::chrono::milliseconds fallback) {
  auto ms = Classed(ErrorCode::kBadDuration,
                    in.Integer("duration_ms", 0, vb::kMaxActionDuration.count()));
  if (!ms) return std::unexpected(ms.error());
  return *ms ? std::chrono::milliseconds(**ms) : fallback;
}

// The members of one action by its type; `a.type` is set.
std::expected<void, Error> ReadAction(Members& in, const std::string& type, const Display& d,
                                      const std::string& path, vb::Action& a) {
  using T = vb::Action::Type;
  if (type == "move" || type == "click" || type == "mouse_down" || type == "mouse_up") {
    a.type = type == "move"         ? T::kMove
             : type == "click"      ? T::kClick
             : type == "mouse_down" ? T::kMouseDown
                                    : T::kMouseUp;
    auto at = ReadPoint(in, d, type == "move");
    if (!at) return std::unexpected(at.error());
    a.at = *at;
    if (type == "move") return {};
    auto button = ReadButton(in);
    if (!button) return std::unexpected(button.error());
    a.button = *button;
    if (type != "click") return {};
    auto count = in.Integer("count", 1, vb::kMaxClickCount);
    if (!count) return std::unexpected(count.error());
    a.count = static_cast<int>(count->value_or(1));
    auto mods = ReadModifiers(in);
    if (!mods) return std::unexpected(mods.error());
    a.modifiers = std::move(*mods);
    return {};
  }
  if (type == "drag") {
    a.type = T::kDrag;
    auto button = ReadButton(in);
    if (!button) return std::unexpected(button.error());
    a.button = *button;
    auto mods = ReadModifiers(in);
    if (!mods) return std::unexpected(mods.error());
    a.modifiers = std::move(*mods);
    auto p = Classed(ErrorCode::kBadPath, in.Array("path"));
    if (!p) return std::unexpected(p.error());
    if (!*p) return Fail(ErrorCode::kMissingField, path + ".path is required");
    const json& points = **p;
    if (points.size() < 2 || points.size() > vb::kMaxPathPoints)
      return Fail(ErrorCode::kBadPath,
                  fmt::format("{}.path must have 2 to {} points", path, vb::kMaxPathPoints));
    for (size_t i = 0; i < points.size(); ++i) {
      auto pt = PathPoint(points[i], d, fmt::format("{}.path[{}]", path, i));
      if (!pt) return std::unexpected(pt.error());
      a.path.push_back(*pt);
    }
    return {};
  }
  if (type == "scroll") {
    a.type = T::kScroll;
    auto at = ReadPoint(in, d, false);
    if (!at) return std::unexpected(at.error());
    a.at = *at;
    auto dx = Classed(ErrorCode::kBadScroll,
                      in.Integer("dx", -vb::kMaxScrollSteps, vb::kMaxScrollSteps));
    if (!dx) return std::unexpected(dx.error());
    auto dy = Classed(ErrorCode::kBadScroll,
                      in.Integer("dy", -vb::kMaxScrollSteps, vb::kMaxScrollSteps));
    if (!dy) return std::unexpected(dy.error());
    a.dx = static_cast<int>(dx->value_or(0));
    a.dy = static_cast<int>(dy->value_or(0));
    auto mods = ReadModifiers(in);
    if (!mods) return std::unexpected(mods.error());
    a.modifiers = std::move(*mods);
    if (a.dx == 0 && a.dy == 0)
      return Fail(ErrorCode::kBadScroll, path + ": dx or dy (wheel steps) must be non-zero");
    return {};
  }
  if (type == "type") {
    a.type = T::kType;
    // 4 bytes per character at most: longer is more characters than allowed, whatever it holds.
    auto text = Classed(ErrorCode::kBadText, in.String("text", 0, vb::kMaxTextChars * 4));
    if (!text) return std::unexpected(text.error());
    if (!*text) return Fail(ErrorCode::kMissingField, path + ".text is required");
    auto cps = vb::DecodeUtf8(**text);
    if (!cps) return Fail(ErrorCode::kBadText, path + ".text: " + cps.error().message);
    if (cps->size() > vb::kMaxTextChars)
      return Fail(ErrorCode::kBadText,
                  fmt::format("{}.text has more than {} characters", path, vb::kMaxTextChars));
    a.text = std::move(*cps);
    return {};
  }
  if (type == "key" || type == "hold_key") {
    a.type = type == "key" ? T::kKey : T::kHoldKey;
    auto keys = Classed(ErrorCode::kBadKey, in.String("keys", 1, 1024));
    if (!keys) return std::unexpected(keys.error());
    if (!*keys)
      return Fail(ErrorCode::kMissingField,
                  path + ".keys is required (e.g. \"ctrl+shift+t\", \"Return\")");
    if (a.type == T::kKey) {
      auto seq = vb::ParseKeySequence(**keys);
      if (!seq) return Fail(ErrorCode::kBadKey, path + ".keys: " + seq.error().message);
      a.keys = std::move(*seq);
      return {};
    }
    auto combo = vb::ParseCombo(**keys);
    if (!combo) return Fail(ErrorCode::kBadKey, path + ".keys: " + combo.error().message);
    a.keys = {std::move(*combo)};
    auto duration = ReadDurationMs(in, std::chrono::milliseconds(500));
    if (!duration) return std::unexpected(duration.error());
    a.duration = *duration;
    return {};
  }
  a.type = T::kWait;
  auto duration = ReadDurationMs(in, std::chrono::milliseconds(1000));
  if (!duration) return std::unexpected(duration.error());
  a.duration = *duration;
  return {};
}

}  // namespace

std::expected<ActionsRequest, Error> ParseActionsRequest(const json& body) {
  if (!body.is_object()) return Fail(ErrorCode::kNotAnObject, "body must be a JSON object");
  Members in(body, "");
  ActionsRequest out;
  auto list = in.Array("actions");
  if (!list) return std::unexpected(list.error());
  if (!*list) return Fail(ErrorCode::kMissingField, "actions is required (a list of actions)");
  if ((*list)->empty() || (*list)->size() > kMaxActionsPerCall)
    return Fail(ErrorCode::kOutOfRange,
                fmt::format("actions must have 1 to {} entries", kMaxActionsPerCall));
  out.actions = **list;
  if (const json* d = in.Any("display")) {
    auto size = ParseDisplay(*d);
    if (!size) return std::unexpected(size.error());
    out.display = *size;
  }
  if (const json* s = in.Any("settle")) {
    if (s->is_boolean()) {
      if (!s->get<bool>()) out.settle.reset();
    } else if (s->is_object()) {
      Members sr(*s, "settle");
      auto quiet = sr.Integer("quiet_ms", 0, 5000);
      if (!quiet) return std::unexpected(quiet.error());
      auto timeout = sr.Integer("timeout_ms", 0, 30000);
      if (!timeout) return std::unexpected(timeout.error());
      auto no_change = sr.Integer("no_change_ms", 0, 30000);
      if (!no_change) return std::unexpected(no_change.error());
      if (auto done = sr.Finish(); !done) return std::unexpected(done.error());
      if (*quiet) out.settle->quiet = std::chrono::milliseconds(**quiet);
      if (*timeout) out.settle->timeout = std::chrono::milliseconds(**timeout);
      if (*no_change) out.settle->no_change = std::chrono::milliseconds(**no_change);
    } else {
      return Fail(ErrorCode::kWrongType,
                  "settle must be true, false or {\"quiet_ms\", \"timeout_ms\", \"no_change_ms\"}");
    }
  }
  if (const json* s = in.Any("screenshot")) {
    if (s->is_boolean()) {
      if (s->get<bool>()) out.screenshot = ImageRequest{};
    } else if (s->is_object()) {
      Members sr(*s, "screenshot");
      auto format = Classed(ErrorCode::kBadImageFormat,
                            sr.Enum("format", {"png", "jpeg"}, ErrorCode::kBadImageFormat));
      if (!format) return std::unexpected(format.error());
      auto quality = sr.Integer("quality", 1, 100);
      if (!quality) return std::unexpected(quality.error());
      if (auto done = sr.Finish(); !done) return std::unexpected(done.error());
      out.screenshot = ImageRequest{};
      if (format->value_or("png") == "jpeg") out.screenshot->format = ImageFormat::kJpeg;
      out.screenshot->quality = static_cast<int>(quality->value_or(80));
    } else {
      return Fail(ErrorCode::kWrongType,
                  "screenshot must be true, false or {\"format\", \"quality\"}");
    }
  }
  if (auto done = in.Finish(); !done) return std::unexpected(done.error());
  return out;
}

std::expected<vb::Action, Error> ParseAction(const json& j, size_t index, const Display& d) {
  std::string path = fmt::format("actions[{}]", index);
  if (!j.is_object()) return Fail(ErrorCode::kNotAnObject, path + " must be an object");
  Members in(j, path);
  auto type = in.Enum("type",
                      {"move", "click", "mouse_down", "mouse_up", "drag", "scroll", "type", "key",
                       "hold_key", "wait"},
                      ErrorCode::kUnknownAction);
  if (!type) return std::unexpected(type.error());
  if (!*type) return Fail(ErrorCode::kMissingField, path + ".type is required");
  vb::Action a;
  if (auto r = ReadAction(in, **type, d, path, a); !r) return std::unexpected(r.error());
  if (auto done = in.Finish(); !done) return std::unexpected(done.error());
  if (auto ok = internal::CheckAction(a, d, path + ": "); !ok) return std::unexpected(ok.error());
  return a;
}

std::expected<std::vector<vb::Action>, Error> ParseActions(const json& actions, const Display& d) {
  std::vector<vb::Action> out;
  for (size_t i = 0; i < actions.size(); ++i) {
    auto a = ParseAction(actions[i], i, d);
    if (!a) return std::unexpected(a.error());
    out.push_back(std::move(*a));
  }
  return out;
}

}  // namespace deskbox::computer_use
