#include "checked_action.h"

namespace deskbox::computer_use::internal {

namespace {

// The parsers map every point onto the screen and bound counts, steps and path lengths before
// Validate sees them; what is left for it is the text's length and control characters, a
// duration given in milliseconds, and an empty key list.
ErrorCode CodeFor(vnc_bridge::Action::Type type) {
  using T = vnc_bridge::Action::Type;
  switch (type) {
    case T::kType:
      return ErrorCode::kBadText;
    case T::kWait:
    case T::kHoldKey:
      return ErrorCode::kBadDuration;
    case T::kKey:
      return ErrorCode::kBadKey;
    case T::kScroll:
      return ErrorCode::kBadScroll;
    case T::kDrag:
      return ErrorCode::kBadPath;
    case T::kClick:
      return ErrorCode::kOutOfRange;
    case T::kMove:
    case T::kMouseDown:
    case T::kMouseUp:
      return ErrorCode::kOutsideDisplay;
  }
  return ErrorCode::kOutOfRange;
}

}  // namespace

std::expected<void, Error> CheckAction(const vnc_bridge::Action& action, const Display& display,
                                       std::string_view prefix) {
  auto v = vnc_bridge::Validate(action, display.screen_w, display.screen_h);
  if (!v)
    return std::unexpected(Error{CodeFor(action.type), std::string(prefix) + v.error().message});
  return {};
}

}  // namespace deskbox::computer_use::internal
