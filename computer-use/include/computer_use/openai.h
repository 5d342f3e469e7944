#pragma once
// OpenAI computer use (Responses API): a computer_call item ({"type": "computer_call",
// "call_id", "action"} or "actions", run in order) or a bare action object, and the
// computer_call_output that goes back. pending_safety_checks are the agent loop's business and
// are not read. Errors here are the caller's (HTTP 400): nothing of a bad call is performed.
#include <chrono>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "computer_use/display.h"
#include "computer_use/error.h"
#include "computer_use/image_request.h"
#include "vnc_bridge/input.h"

namespace deskbox::computer_use {

// Pixels of scroll_x / scroll_y per wheel step; any non-zero amount is at least one step.
inline constexpr int kOpenAiPixelsPerScrollStep = 100;
// A wait without duration_ms, as OpenAI's samples wait.
inline constexpr std::chrono::milliseconds kOpenAiDefaultWait{2000};

// A request body, its actions not yet read.
struct OpenAiCall {
  std::string call_id;                  // empty when the body had none
  std::vector<nlohmann::json> actions;  // in order
  bool listed = false;                  // from `actions` (paths "actions[i]"), else "action"
};

std::expected<OpenAiCall, Error> ParseOpenAiCall(const nlohmann::json& body);

// One action object, coordinates in `display` pixels; `path` names it in errors ("action",
// "actions[2]"). A screenshot action is no action: nullopt.
std::expected<std::optional<vnc_bridge::Action>, Error> ParseOpenAiAction(
    const nlohmann::json& action, const Display& display, const std::string& path);

// The actions of a call to perform, and for each the object it came from (for the timeline).
struct OpenAiStep {
  std::vector<vnc_bridge::Action> actions;
  nlohmann::json params = nlohmann::json::array();  // params[i] is what actions[i] came from
};

// Every action of `call`, in order, screenshots left out; the first bad one is the error.
std::expected<OpenAiStep, Error> ParseOpenAiActions(const OpenAiCall& call,
                                                    const Display& display);

// {"type": "computer_call_output", "call_id"?, "output": {"type": "computer_screenshot",
// "image_url": "data:image/…;base64,…"}} (call_id only when not empty).
nlohmann::json OpenAiCallOutput(ImageFormat format, std::string_view base64,
                                std::string_view call_id);

}  // namespace deskbox::computer_use
