#pragma once
// Our own actions body (POST /v1/sandboxes/{id}/actions, docs/computer-use.md):
//   {"actions": [...], "display"?, "settle"?, "screenshot"?}
// read in two steps, because the actions' coordinates need the screen's size: the envelope first
// (before the screen is reached), then the actions against the display over that screen. Every
// action is checked before any is performed.
#include <cstddef>
#include <expected>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "computer_use/display.h"
#include "computer_use/error.h"
#include "computer_use/image_request.h"
#include "vnc_bridge/input.h"
#include "vnc_bridge/mirror.h"

namespace deskbox::computer_use {

// Per call, for /actions and for an OpenAI computer_call's `actions`.
inline constexpr size_t kMaxActionsPerCall = 100;

struct ActionsRequest {
  nlohmann::json actions;               // the list, 1..kMaxActionsPerCall entries, not yet read
  std::optional<DisplaySize> display;   // the call's own `display`
  std::optional<vnc_bridge::SettleOptions> settle = vnc_bridge::SettleOptions{};  // nullopt: off
  std::optional<ImageRequest> screenshot;  // asked for (format and quality; no explicit size)
};

// The envelope: strict (unknown members refused), the first problem reported.
std::expected<ActionsRequest, Error> ParseActionsRequest(const nlohmann::json& body);

// actions[index] of the body, coordinates in `display` pixels, mapped to the screen and checked
// against vnc_bridge::Validate.
std::expected<vnc_bridge::Action, Error> ParseAction(const nlohmann::json& action, size_t index,
                                                      const Display& display);

// Every entry of `actions` (a list), in order; the first bad one is the error.
std::expected<std::vector<vnc_bridge::Action>, Error> ParseActions(const nlohmann::json& actions,
                                                                   const Display& display);

}  // namespace deskbox::computer_use
