#pragma once
// Typed desktop actions and the input that performs them through a FrameMirror: pointer
// moves, clicks, presses, drags and wheel steps; key combos; Unicode text (keys.h says how).
// Coordinates here are screen pixels; mapping from a model's display size is the caller's.
//
// Limits (also in docs/computer-use.md): clicks per action ≤ 10, wheel steps per axis ≤ 100,
// text ≤ 10000 characters, drag paths ≤ 1000 points, wait and hold_key ≤ 30 s.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "vnc_bridge/error.h"
#include "vnc_bridge/mirror.h"

namespace deskbox::vnc_bridge {

inline constexpr int kMaxClickCount = 10;
inline constexpr int kMaxScrollSteps = 100;
inline constexpr size_t kMaxTextChars = 10000;
inline constexpr size_t kMaxPathPoints = 1000;
inline constexpr std::chrono::milliseconds kMaxActionDuration{30000};

// X pointer buttons (RFB carries buttons 1..8).
enum class MouseButton : uint8_t { kLeft = 1, kMiddle = 2, kRight = 3, kBack = 8 };

struct Action {
  enum class Type {
    kMove,
    kClick,
    kMouseDown,
    kMouseUp,
    kDrag,
    kScroll,
    kType,
    kKey,
    kHoldKey,
    kWait
  };
  Type type = Type::kWait;
  std::optional<Point>
      at;  // move, click, mouse_down/up, scroll: where (else: where the pointer is)
  MouseButton button = MouseButton::kLeft;
  int count = 1;            // click
  std::vector<Point> path;  // drag: pressed at the first point, released at the last
  int dx = 0, dy = 0;       // scroll: wheel steps, positive right / down
  std::u32string text;      // type
  std::vector<std::vector<uint32_t>> keys;  // key: combos pressed one after another; hold_key: one
  std::vector<uint32_t> modifiers;          // held during a click, drag or scroll
  std::chrono::milliseconds duration{0};    // wait, hold_key
};

const char* ToString(Action::Type t);

// Checks the limits above and that points lie on a `width`×`height` screen (kBadInput).
std::expected<void, Error> Validate(const Action& a, uint32_t width, uint32_t height);

// Sends the input for `a` (pacing drags so that applications see the motion). Returns when the
// last event is queued to the guest, after any wait or hold. Errors are the mirror's
// (FrameMirror::Pointer and Key).
boost::asio::awaitable<std::expected<void, Error>> Perform(FrameMirror& mirror, const Action& a);

}  // namespace deskbox::vnc_bridge
