#include "vnc_bridge/input.h"

#include <fmt/format.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <cmath>

#include "vnc_bridge/keys.h"

namespace deskbox::vnc_bridge {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

std::unexpected<Error> BadInput(std::string message) {
  return std::unexpected(Error{ErrorCode::kBadInput, std::move(message)});
}

}  // namespace

const char* ToString(Action::Type t) {
  switch (t) {
    case Action::Type::kMove:
      return "move";
    case Action::Type::kClick:
      return "click";
    case Action::Type::kMouseDown:
      return "mouse_down";
    case Action::Type::kMouseUp:
      return "mouse_up";
    case Action::Type::kDrag:
      return "drag";
    case Action::Type::kScroll:
      return "scroll";
    case Action::Type::kType:
      return "type";
    case Action::Type::kKey:
      return "key";
    case Action::Type::kHoldKey:
      return "hold_key";
    case Action::Type::kWait:
      return "wait";
  }
  return "?";
}

std::expected<void, Error> Validate(const Action& a, uint32_t width, uint32_t height) {
  auto on_screen = [&](const Point& p) -> std::expected<void, Error> {
    if (p.x >= width || p.y >= height)
      return BadInput(
          fmt::format("point ({}, {}) is outside the {}x{} screen", p.x, p.y, width, height));
    return {};
  };
  if (a.at)
    if (auto r = on_screen(*a.at); !r) return r;
  for (const auto& p : a.path)
    if (auto r = on_screen(p); !r) return r;
  switch (a.type) {
    case Action::Type::kClick:
      if (a.count < 1 || a.count > kMaxClickCount)
        return BadInput(fmt::format("count must be between 1 and {}", kMaxClickCount));
      break;
    case Action::Type::kDrag:
      if (a.path.size() < 2) return BadInput("a drag needs a path of at least 2 points");
      if (a.path.size() > kMaxPathPoints)
        return BadInput(fmt::format("a drag path has at most {} points", kMaxPathPoints));
      break;
    case Action::Type::kScroll:
      if (std::abs(a.dx) > kMaxScrollSteps || std::abs(a.dy) > kMaxScrollSteps)
        return BadInput(
            fmt::format("scroll steps per axis must be between -{0} and {0}", kMaxScrollSteps));
      break;
    case Action::Type::kType:
      if (a.text.size() > kMaxTextChars)
        return BadInput(fmt::format("text has more than {} characters", kMaxTextChars));
      for (char32_t c : a.text)
        if ((c < 0x20 && c != U'\n' && c != U'\t' && c != U'\r') || c == 0x7f)
          return BadInput(
              fmt::format("text contains the control character U+{:04X} (use a key action)",
                          static_cast<uint32_t>(c)));
      break;
    case Action::Type::kKey:
      if (a.keys.empty()) return BadInput("no key given");
      break;
    case Action::Type::kHoldKey:
      if (a.keys.size() != 1) return BadInput("hold_key takes one key combo");
      [[fallthrough]];
    case Action::Type::kWait:
      if (a.duration < 0ms || a.duration > kMaxActionDuration)
        return BadInput(
            fmt::format("duration must be between 0 and {} s", kMaxActionDuration.count() / 1000));
      break;
    default:
      break;
  }
  return {};
}

namespace {

uint8_t Bit(MouseButton b) {
  return static_cast<uint8_t>(1u << (static_cast<unsigned>(b) - 1));
}

// Between the clicks of one click action: the longest wait for the X server to take the last
// one, and the pause after it.
constexpr std::chrono::milliseconds kClickSyncTimeout{1000};
constexpr std::chrono::milliseconds kClickGap{15};
// Typing: characters between looks at the unsent input (16 bytes each), the unsent input above
// which typing waits for the writer, and how long a guest may take nothing before the action
// fails.
constexpr size_t kTypeRun = 256;
constexpr size_t kUnsentMark = 64 * 1024;
constexpr std::chrono::milliseconds kDrainTimeout{10000};

asio::awaitable<void> Sleep(std::chrono::milliseconds d) {
  asio::steady_timer t(co_await asio::this_coro::executor);
  t.expires_after(d);
  boost::system::error_code ec;
  co_await t.async_wait(asio::redirect_error(asio::use_awaitable, ec));
}

std::expected<void, Error> PressAll(FrameMirror& m, const std::vector<uint32_t>& keys) {
  for (uint32_t k : keys)
    if (auto r = m.Key(true, k); !r) return r;
  return {};
}

std::expected<void, Error> ReleaseAll(FrameMirror& m, const std::vector<uint32_t>& keys) {
  for (auto it = keys.rbegin(); it != keys.rend(); ++it)
    if (auto r = m.Key(false, *it); !r) return r;
  return {};
}

}  // namespace

asio::awaitable<std::expected<void, Error>> Perform(FrameMirror& m, const Action& a) {
  using T = Action::Type;
  auto here = a.at.value_or(m.pointer());
  uint8_t held = m.buttons();
  auto run = [&]() -> std::expected<void, Error> {
    switch (a.type) {
      case T::kMove:
        return m.Pointer(held, here.x, here.y);
      case T::kMouseDown:
        return m.Pointer(held | Bit(a.button), here.x, here.y);
      case T::kMouseUp:
        return m.Pointer(held & static_cast<uint8_t>(~Bit(a.button)), here.x, here.y);
      case T::kScroll: {
        if (auto r = m.Pointer(held, here.x, here.y); !r) return r;
        // Wheel buttons: 4 up, 5 down, 6 left, 7 right; one press and release per step.
        auto steps = [&](int n, uint8_t neg, uint8_t pos) -> std::expected<void, Error> {
          uint8_t bit = static_cast<uint8_t>(1u << ((n < 0 ? neg : pos) - 1));
          for (int i = 0; i < std::abs(n); ++i) {
            if (auto r = m.Pointer(held | bit, here.x, here.y); !r) return r;
            if (auto r = m.Pointer(held, here.x, here.y); !r) return r;
          }
          return {};
        };
        if (auto r = steps(a.dy, 4, 5); !r) return r;
        return steps(a.dx, 6, 7);
      }
      case T::kKey:
        for (const auto& combo : a.keys) {
          if (auto r = PressAll(m, combo); !r) return r;
          if (auto r = ReleaseAll(m, combo); !r) return r;
        }
        return {};
      default:
        return {};
    }
  };
  switch (a.type) {
    case T::kType: {
      // In runs, each queued once the writer has caught up with the ones before: typing long
      // text keeps little input unsent however long the text.
      size_t typed = 0;
      for (char32_t c : a.text) {
        uint32_t k = KeysymForCodePoint(c);
        if (auto r = m.Key(true, k); !r) co_return r;
        if (auto r = m.Key(false, k); !r) co_return r;
        if (++typed % kTypeRun == 0 && m.unsent() > kUnsentMark) {
          if (auto r = co_await m.Drain(kUnsentMark / 2, kDrainTimeout); !r) co_return r;
        }
      }
      co_return std::expected<void, Error>{};
    }
    case T::kWait:
      co_await Sleep(a.duration);
      co_return std::expected<void, Error>{};
    case T::kHoldKey: {
      if (auto r = PressAll(m, a.keys[0]); !r) co_return r;
      co_await Sleep(a.duration);
      co_return ReleaseAll(m, a.keys[0]);
    }
    case T::kClick: {
      if (auto r = PressAll(m, a.modifiers); !r) co_return r;
      auto clicks = [&]() -> asio::awaitable<std::expected<void, Error>> {
        if (auto r = m.Pointer(held, here.x, here.y); !r) co_return r;
        for (int i = 0; i < a.count; ++i) {
          if (i > 0) {
            // Applications count a press as the next of a double or triple click only when
            // its X timestamp differs from the last one's (Chromium takes equal ones for the
            // same event). Sent together, two presses are often stamped in the same
            // millisecond: wait until the X server has taken the last click, then a little.
            co_await m.Sync(kClickSyncTimeout);
            co_await Sleep(kClickGap);
          }
          if (auto r = m.Pointer(held | Bit(a.button), here.x, here.y); !r) co_return r;
          if (auto r = m.Pointer(held, here.x, here.y); !r) co_return r;
        }
        co_return std::expected<void, Error>{};
      };
      auto r = co_await clicks();
      auto released = ReleaseAll(m, a.modifiers);
      if (!r) co_return r;
      co_return released;
    }
    case T::kDrag: {
      if (auto r = PressAll(m, a.modifiers); !r) co_return r;
      const Point& p0 = a.path.front();
      if (auto r = m.Pointer(held, p0.x, p0.y); !r) co_return r;
      if (auto r = m.Pointer(held | Bit(a.button), p0.x, p0.y); !r) co_return r;
      // Intermediate points at most 20 px apart, paced so that the application sees a drag.
      Point prev = p0;
      for (size_t i = 1; i < a.path.size(); ++i) {
        const Point& p = a.path[i];
        double dist = std::hypot(double(p.x) - prev.x, double(p.y) - prev.y);
        int n = std::clamp(static_cast<int>(dist / 20), 1, 50);
        for (int k = 1; k <= n; ++k) {
          auto x = static_cast<uint32_t>(std::lround(prev.x + (double(p.x) - prev.x) * k / n));
          auto y = static_cast<uint32_t>(std::lround(prev.y + (double(p.y) - prev.y) * k / n));
          co_await Sleep(8ms);
          if (auto r = m.Pointer(held | Bit(a.button), x, y); !r) co_return r;
        }
        prev = p;
      }
      co_await Sleep(8ms);
      if (auto r = m.Pointer(held, prev.x, prev.y); !r) co_return r;
      co_return ReleaseAll(m, a.modifiers);
    }
    default: {
      if (auto r = PressAll(m, a.modifiers); !r) co_return r;
      if (auto r = run(); !r) {
        (void)ReleaseAll(m, a.modifiers);
        co_return r;
      }
      co_return ReleaseAll(m, a.modifiers);
    }
  }
}

}  // namespace deskbox::vnc_bridge
