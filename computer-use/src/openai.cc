#include "computer_use/openai.h"

#include <fmt/format.h>

#include <algorithm>

#include "checked_action.h"
#include "computer_use/actions.h"
#include "members.h"
#include "vnc_bridge/keys.h"

namespace deskbox::computer_use {

using internal::Fail;
using nlohmann::json;
namespace vb = vnc_bridge;

namespace {

// Wheel steps for a scroll of `px` pixels: to the nearest step, at least one for any non-zero
// amount. Computed unsigned so that no amount overflows.
uint64_t ScrollSteps(int64_t px) {
  if (px == 0) return 0;
  uint64_t magnitude = px < 0 ? 0 - static_cast<uint64_t>(px) : static_cast<uint64_t>(px);
  uint64_t step = kOpenAiPixelsPerScrollStep;
  return std::max<uint64_t>(1, (magnitude + step / 2) / step);
}

}  // namespace

std::expected<OpenAiCall, Error> ParseOpenAiCall(const json& body) {
  if (!body.is_object())
    return Fail(ErrorCode::kNotAnObject,
                "the body must be a computer_call item or an action object");
  OpenAiCall call;
  if (auto id = body.find("call_id"); id != body.end() && !id->is_null()) {
    if (!id->is_string()) return Fail(ErrorCode::kWrongType, "call_id must be a string");
    call.call_id = id->get<std::string>();
  }
  auto type = body.find("type");
  bool item = type != body.end() && type->is_string() &&
              type->get_ref<const std::string&>() == "computer_call";
  if (!item) {
    call.actions.push_back(body);
    return call;
  }
  if (auto list = body.find("actions"); list != body.end()) {
    if (!list->is_array() || list->empty() || list->size() > kMaxActionsPerCall)
      return Fail(list->is_array() ? ErrorCode::kOutOfRange : ErrorCode::kWrongType,
                  fmt::format("actions must be a list of 1 to {} actions", kMaxActionsPerCall));
    call.actions.assign(list->begin(), list->end());
    call.listed = true;
  } else if (auto one = body.find("action"); one != body.end()) {
    call.actions.push_back(*one);
  } else {
    return Fail(ErrorCode::kMissingField, "a computer_call needs action or actions");
  }
  return call;
}

std::expected<std::optional<vb::Action>, Error> ParseOpenAiAction(const json& j, const Display& d,
                                                                  const std::string& path) {
  using T = vb::Action::Type;
  if (!j.is_object()) return Fail(ErrorCode::kNotAnObject, path + " must be an object");
  auto type_it = j.find("type");
  if (type_it == j.end() || type_it->is_null())
    return Fail(ErrorCode::kMissingField, path + ".type is required");
  if (!type_it->is_string()) return Fail(ErrorCode::kWrongType, path + ".type is required");
  const std::string& type = type_it->get_ref<const std::string&>();
  // An integer member; `code` classes a value that is not one.
  auto num = [&](const char* k, bool required,
                 ErrorCode code) -> std::expected<std::optional<int64_t>, Error> {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) {
      if (required) return Fail(ErrorCode::kMissingField, fmt::format("{}.{} is required", path, k));
      return std::optional<int64_t>{};
    }
    if (!it->is_number_integer()) return Fail(code, fmt::format("{}.{} must be an integer", path, k));
    // Unsigned beyond int64 is beyond every bound: kept there rather than wrapped negative.
    if (it->is_number_unsigned() && it->get<uint64_t>() > INT64_MAX)
      return std::optional<int64_t>{INT64_MAX};
    return std::optional<int64_t>{it->get<int64_t>()};
  };
  auto at = [&]() -> std::expected<vb::Point, Error> {
    auto x = num("x", true, ErrorCode::kBadCoordinate);
    if (!x) return std::unexpected(x.error());
    auto y = num("y", true, ErrorCode::kBadCoordinate);
    if (!y) return std::unexpected(y.error());
    if (**x < 0 || **y < 0 || **x >= d.w() || **y >= d.h())
      return Fail(ErrorCode::kOutsideDisplay,
                  fmt::format("{}: ({}, {}) is outside the {}x{} display", path, j.at("x").dump(),
                              j.at("y").dump(), d.w(), d.h()));
    return d.ToScreen(static_cast<uint32_t>(**x), static_cast<uint32_t>(**y));
  };
  vb::Action a;
  if (type == "click" || type == "double_click") {
    auto p = at();
    if (!p) return std::unexpected(p.error());
    a.type = T::kClick;
    a.at = *p;
    a.count = type == "double_click" ? 2 : 1;
    // A button that is no string is the default, left: OpenAI's schema always sends one.
    auto b = j.find("button");
    std::string button = b != j.end() && b->is_string() ? b->get<std::string>() : "left";
    if (button == "left")
      a.button = vb::MouseButton::kLeft;
    else if (button == "right")
      a.button = vb::MouseButton::kRight;
    else if (button == "wheel" || button == "middle")
      a.button = vb::MouseButton::kMiddle;
    else if (button == "back")
      a.button = vb::MouseButton::kBack;
    else if (button == "forward")
      return Fail(ErrorCode::kBadButton,
                  path +
                      ".button: 'forward' (X button 9) cannot be sent over the guest's RFB, "
                      "which carries buttons 1 to 8");
    else
      return Fail(ErrorCode::kBadButton,
                  path + ".button must be left, right, wheel, back or forward");
  } else if (type == "move") {
    auto p = at();
    if (!p) return std::unexpected(p.error());
    a.type = T::kMove;
    a.at = *p;
  } else if (type == "drag") {
    auto p = j.find("path");
    if (p == j.end() || !p->is_array() || p->size() < 2 || p->size() > vb::kMaxPathPoints)
      return Fail(ErrorCode::kBadPath,
                  fmt::format("{}.path must hold 2 to {} points", path, vb::kMaxPathPoints));
    a.type = T::kDrag;
    for (size_t i = 0; i < p->size(); ++i) {
      const json& q = (*p)[i];
      if (!q.is_object() || !q.contains("x") || !q.contains("y") || !q["x"].is_number_integer() ||
          !q["y"].is_number_integer())
        return Fail(ErrorCode::kBadCoordinate,
                    fmt::format("{}.path[{}] must be {{\"x\", \"y\"}}", path, i));
      int64_t x = q["x"].get<int64_t>(), y = q["y"].get<int64_t>();
      if (x < 0 || y < 0 || x >= d.w() || y >= d.h())
        return Fail(ErrorCode::kOutsideDisplay,
                    fmt::format("{}.path[{}] ({}, {}) is outside the {}x{} display", path, i, x, y,
                                d.w(), d.h()));
      a.path.push_back(d.ToScreen(static_cast<uint32_t>(x), static_cast<uint32_t>(y)));
    }
  } else if (type == "keypress") {
    auto k = j.find("keys");
    if (k == j.end() || !k->is_array() || k->empty() || k->size() > 8)
      return Fail(ErrorCode::kBadKey, path + ".keys must be a list of 1 to 8 key names");
    std::vector<uint32_t> combo;
    for (const auto& name : *k) {
      if (!name.is_string()) return Fail(ErrorCode::kBadKey, path + ".keys must hold strings");
      auto ks = vb::KeysymForName(name.get_ref<const std::string&>());
      if (!ks) return Fail(ErrorCode::kBadKey, path + ".keys: " + ks.error().message);
      combo.push_back(*ks);
    }
    a.type = T::kKey;
    a.keys = {std::move(combo)};
  } else if (type == "scroll") {
    auto p = at();
    if (!p) return std::unexpected(p.error());
    auto sx = num("scroll_x", false, ErrorCode::kBadScroll);
    auto sy = num("scroll_y", false, ErrorCode::kBadScroll);
    if (!sx) return std::unexpected(sx.error());
    if (!sy) return std::unexpected(sy.error());
    uint64_t steps_x = ScrollSteps(sx->value_or(0)), steps_y = ScrollSteps(sy->value_or(0));
    if (steps_x > vb::kMaxScrollSteps || steps_y > vb::kMaxScrollSteps)
      return Fail(ErrorCode::kBadScroll,
                  fmt::format("{}: at most {} px per axis", path,
                              vb::kMaxScrollSteps * kOpenAiPixelsPerScrollStep));
    if (steps_x == 0 && steps_y == 0)
      return Fail(ErrorCode::kBadScroll, path + ": scroll_x or scroll_y must be non-zero");
    a.type = T::kScroll;
    a.at = *p;
    a.dx = (sx->value_or(0) < 0 ? -1 : 1) * static_cast<int>(steps_x);
    a.dy = (sy->value_or(0) < 0 ? -1 : 1) * static_cast<int>(steps_y);
  } else if (type == "type") {
    auto t = j.find("text");
    if (t == j.end() || t->is_null()) return Fail(ErrorCode::kMissingField, path + ".text is required");
    if (!t->is_string()) return Fail(ErrorCode::kBadText, path + ".text is required");
    auto cps = vb::DecodeUtf8(t->get_ref<const std::string&>());
    if (!cps) return Fail(ErrorCode::kBadText, path + ".text: " + cps.error().message);
    a.type = T::kType;
    a.text = std::move(*cps);
  } else if (type == "wait") {
    auto ms = num("duration_ms", false, ErrorCode::kBadDuration);
    if (!ms) return std::unexpected(ms.error());
    a.type = T::kWait;
    a.duration = ms->has_value() ? std::chrono::milliseconds(**ms) : kOpenAiDefaultWait;
  } else if (type == "screenshot") {
    return std::optional<vb::Action>{};
  } else {
    return Fail(ErrorCode::kUnknownAction,
                fmt::format("{}.type: unknown action '{}'", path, type.substr(0, 64)));
  }
  if (auto ok = internal::CheckAction(a, d, path + ": "); !ok) return std::unexpected(ok.error());
  return std::optional<vb::Action>{std::move(a)};
}

std::expected<OpenAiStep, Error> ParseOpenAiActions(const OpenAiCall& call, const Display& d) {
  OpenAiStep step;
  for (size_t i = 0; i < call.actions.size(); ++i) {
    auto a = ParseOpenAiAction(call.actions[i], d,
                               call.listed ? fmt::format("actions[{}]", i) : "action");
    if (!a) return std::unexpected(a.error());
    if (!*a) continue;  // a screenshot: the answer is one
    step.actions.push_back(std::move(**a));
    step.params.push_back(call.actions[i]);
  }
  return step;
}

json OpenAiCallOutput(ImageFormat format, std::string_view base64, std::string_view call_id) {
  json r = {{"type", "computer_call_output"},
            {"output",
             {{"type", "computer_screenshot"},
              {"image_url", fmt::format("data:{};base64,{}", MediaType(format), base64)}}}};
  if (!call_id.empty()) r["call_id"] = call_id;
  return r;
}

}  // namespace deskbox::computer_use
