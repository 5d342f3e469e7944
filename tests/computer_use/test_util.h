#pragma once
// Shared by the computer_use tests: what a parser made of an input, as one line (the actions as
// Describe prints them, or "code: message"), so that each table row holds an input and all it
// must produce.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "computer_use/actions.h"
#include "computer_use/anthropic.h"
#include "computer_use/display.h"
#include "computer_use/error.h"
#include "computer_use/openai.h"
#include "describe.h"

namespace deskbox::computer_use::test {

// A 1280x800 screen with no declared display.
inline const Display kScreen{0, 0, 1280, 800};
// The display 1024x640 declared over it: 1.25 screen pixels per display pixel.
inline const Display kScaled{1024, 640, 1280, 800};
// A display larger than the screen: 2/3 screen pixel per display pixel.
inline const Display kLarger{1920, 1200, 1280, 800};

inline std::string Outcome(const Error& e) {
  return std::string(ToString(e.code)) + ": " + e.message;
}

// The actions joined by "; ", or "(no action)".
inline std::string Lines(const std::vector<vnc_bridge::Action>& actions) {
  if (actions.empty()) return "(no action)";
  std::string out;
  for (const auto& a : actions) out += (out.empty() ? "" : "; ") + Describe(a);
  return out;
}

// A body through ParseAnthropicCall and ParseAnthropic. cursor_position and zoom, which are no
// actions, read "cursor_position" and "zoom X,Y WxH" (screen pixels).
inline std::string Anthropic(const nlohmann::json& body, const Display& d) {
  auto call = ParseAnthropicCall(body);
  if (!call) return Outcome(call.error());
  auto step = ParseAnthropic(call->input, d);
  if (!step) return Outcome(step.error());
  if (step->cursor_position) return "cursor_position";
  if (step->zoom)
    return fmt::format("zoom {},{} {}x{}", step->zoom->x, step->zoom->y, step->zoom->w,
                       step->zoom->h);
  return Lines(step->actions);
}

// A body through ParseOpenAiCall and ParseOpenAiActions.
inline std::string OpenAi(const nlohmann::json& body, const Display& d) {
  auto call = ParseOpenAiCall(body);
  if (!call) return Outcome(call.error());
  auto step = ParseOpenAiActions(*call, d);
  if (!step) return Outcome(step.error());
  return Lines(step->actions);
}

// An actions body through ParseActionsRequest and ParseActions, its display (if any) over the
// screen of `screen`.
inline std::string Body(const nlohmann::json& body, const Display& screen) {
  auto req = ParseActionsRequest(body);
  if (!req) return Outcome(req.error());
  auto actions =
      ParseActions(req->actions, DisplayOver(req->display, screen.screen_w, screen.screen_h));
  if (!actions) return Outcome(actions.error());
  return Lines(*actions);
}

// One row of a table: a test of its own, named `name`.
struct Case {
  std::string name;
  std::string input;  // JSON text
  std::string want;
  Display display = kScreen;
};

inline void PrintTo(const Case& c, std::ostream* os) {
  *os << c.input;
}

inline std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

}  // namespace deskbox::computer_use::test
