#include "vnc_bridge/client_filter.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace deskbox::vnc_bridge {
namespace {

// Client → server message types (RFC 6143 §7.5 and the registered extensions noVNC uses).
enum : uint8_t {
  kSetPixelFormat = 0,
  kSetEncodings = 2,
  kFramebufferUpdateRequest = 3,
  kKeyEvent = 4,
  kPointerEvent = 5,
  kClientCutText = 6,
  kEnableContinuousUpdates = 150,
  kClientFence = 248,
  kXvp = 250,
  kSetDesktopSize = 251,
  kQemu = 255,
};
constexpr uint8_t kQemuExtendedKeyEvent = 0;
constexpr uint8_t kMaxScreens = 64;

uint16_t Be16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t Be32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 | static_cast<uint32_t>(p[2]) << 8 | p[3];
}

}  // namespace

std::expected<void, Error> ClientFilter::Fail(ErrorCode code, std::string why) {
  state_ = State::kFailed;
  return std::unexpected(Error{code, std::move(why)});
}

std::expected<size_t, Error> ClientFilter::HeaderLength() const {
  switch (head_[0]) {
    case kSetPixelFormat: return 20;
    case kSetEncodings: return 4;
    case kFramebufferUpdateRequest: return 10;
    case kKeyEvent: return 8;
    case kPointerEvent: return 6;
    case kClientCutText: return 8;
    case kEnableContinuousUpdates: return 10;
    case kClientFence: return 9;
    case kXvp: return 4;
    case kSetDesktopSize: return 8;
    case kQemu:
      if (have_ < 2) return 0;
      if (head_[1] != kQemuExtendedKeyEvent)
        return std::unexpected(
            Error{ErrorCode::kUnsupported,
                  fmt::format("viewer sent QEMU client message subtype {}, which is not allowed",
                              head_[1])});
      return 12;
    default:
      return std::unexpected(
          Error{ErrorCode::kUnsupported,
                fmt::format("viewer sent unknown RFB message type {}", head_[0])});
  }
}

std::expected<void, Error> ClientFilter::Complete(std::string& out) {
  auto pass = [&] { out.append(reinterpret_cast<const char*>(head_), have_); };
  auto input = [&](uint32_t& counter) {
    ++counter;
    if (may_control_) pass();
  };
  body_left_ = 0;
  switch (head_[0]) {
    case kSetEncodings: {
      uint16_t n = Be16(head_ + 2);
      if (n > kMaxViewerEncodings)
        return Fail(ErrorCode::kTooLarge,
                    fmt::format("viewer sent SetEncodings with {} encodings (at most {})", n,
                                kMaxViewerEncodings));
      pass();
      body_left_ = 4ull * n;
      state_ = State::kBody;
      break;
    }
    case kClientCutText: {
      // A negative length is the extended clipboard format: its absolute value is the length.
      auto len = static_cast<int32_t>(Be32(head_ + 4));
      uint64_t n = len < 0 ? -static_cast<int64_t>(len) : static_cast<uint64_t>(len);
      if (n > kMaxViewerCutText)
        return Fail(ErrorCode::kTooLarge,
                    fmt::format("viewer sent {} bytes of clipboard text (at most {})", n,
                                kMaxViewerCutText));
      input(counts_.clipboard);
      body_left_ = n;
      state_ = may_control_ ? State::kBody : State::kSkip;
      break;
    }
    case kClientFence: {
      uint8_t n = head_[8];
      if (n > kMaxViewerFenceBytes)
        return Fail(ErrorCode::kTooLarge,
                    fmt::format("viewer sent a fence with {} bytes of payload (at most {})", n,
                                kMaxViewerFenceBytes));
      pass();
      body_left_ = n;
      state_ = State::kBody;
      break;
    }
    case kSetDesktopSize: {
      uint8_t screens = head_[6];
      if (screens > kMaxScreens)
        return Fail(ErrorCode::kTooLarge,
                    fmt::format("viewer sent SetDesktopSize with {} screens (at most {})", screens,
                                kMaxScreens));
      body_left_ = 16ull * screens;  // dropped for everyone
      state_ = State::kSkip;
      break;
    }
    case kXvp: state_ = State::kMessage; break;  // dropped for everyone
    case kKeyEvent:
    case kQemu: input(counts_.key); state_ = State::kMessage; break;
    case kPointerEvent: input(counts_.pointer); state_ = State::kMessage; break;
    default: pass(); state_ = State::kMessage; break;
  }
  have_ = 0;
  if ((state_ == State::kBody || state_ == State::kSkip) && body_left_ == 0) state_ = State::kMessage;
  return {};
}

std::expected<void, Error> ClientFilter::Feed(std::span<const uint8_t> in, std::string& out) {
  size_t i = 0;
  while (i < in.size()) {
    switch (state_) {
      case State::kFailed:
        return std::unexpected(Error{ErrorCode::kClosed, "the viewer's stream already failed"});
      case State::kVersion: {
        size_t take = std::min<size_t>(12 - have_, in.size() - i);
        std::memcpy(head_ + have_, in.data() + i, take);
        have_ += take;
        i += take;
        if (have_ < 12) break;
        std::string v(reinterpret_cast<const char*>(head_), 12);
        if (v != "RFB 003.008\n" && v != "RFB 003.007\n" && v != "RFB 003.003\n") {
          std::string shown;
          for (char c : v) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
          return Fail(
              ErrorCode::kUnsupported,
              fmt::format("viewer sent protocol version '{}' (3.3, 3.7 or 3.8 expected)", shown));
        }
        v33_ = v == "RFB 003.003\n";
        out += v;
        have_ = 0;
        state_ = v33_ ? State::kClientInit : State::kSecurity;
        break;
      }
      case State::kSecurity: {
        uint8_t type = in[i++];
        if (type != 1)
          return Fail(
              ErrorCode::kUnsupported,
              fmt::format("viewer chose security type {} (only None, 1, is offered)", type));
        out.push_back(static_cast<char>(type));
        state_ = State::kClientInit;
        break;
      }
      case State::kClientInit:
        ++i;
        out.push_back('\x01');  // shared, whatever the viewer asked
        state_ = State::kMessage;
        break;
      case State::kMessage: {
        // Accumulating a message's fixed part; a QEMU message's length depends on its subtype.
        if (have_ == 0 || (head_[0] == kQemu && have_ < 2)) head_[have_++] = in[i++];
        auto need = HeaderLength();
        if (!need) return Fail(need.error().code, std::move(need.error().message));
        if (*need == 0) break;
        size_t take = std::min(*need - have_, in.size() - i);
        std::memcpy(head_ + have_, in.data() + i, take);
        have_ += take;
        i += take;
        if (have_ == *need)
          if (auto c = Complete(out); !c) return c;
        break;
      }
      case State::kBody:
      case State::kSkip: {
        size_t take = static_cast<size_t>(std::min<uint64_t>(body_left_, in.size() - i));
        if (state_ == State::kBody) out.append(reinterpret_cast<const char*>(in.data() + i), take);
        i += take;
        body_left_ -= take;
        if (body_left_ == 0) state_ = State::kMessage;
        break;
      }
    }
  }
  return {};
}

}  // namespace deskbox::vnc_bridge
