#pragma once
// vnc_bridge::Validate, the limits every action meets before it is performed, with its refusal
// classed by what the parsers leave it to catch.
#include <string_view>

#include "computer_use/display.h"
#include "computer_use/error.h"
#include "vnc_bridge/input.h"

namespace deskbox::computer_use::internal {

// Validate(action) on the display's screen; the message is `prefix` + Validate's.
std::expected<void, Error> CheckAction(const vnc_bridge::Action& action, const Display& display,
                                       std::string_view prefix);

}  // namespace deskbox::computer_use::internal
