#include "vnc_bridge/rfb_client.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <utility>

#include "big_endian.h"

namespace deskbox::vnc_bridge {

namespace {

constexpr int32_t kEncodingRaw = 0;
constexpr int32_t kEncodingCopyRect = 1;
constexpr int32_t kEncodingDesktopSize = -223;
constexpr int32_t kEncodingFence = -312;
constexpr uint8_t kMessageFence = 248;
// Fence flags.
constexpr uint32_t kFenceBlockBefore = 1u << 0;
constexpr uint32_t kFenceBlockAfter = 1u << 1;
constexpr uint32_t kFenceSyncNext = 1u << 2;
constexpr uint32_t kFenceRequest = 1u << 31;

uint16_t U16(const uint8_t* p) {
  return static_cast<uint16_t>(p[0] << 8 | p[1]);
}
uint32_t U32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 |
         static_cast<uint32_t>(p[2]) << 8 | p[3];
}

Rect Bounding(const std::vector<Rect>& rects) {
  uint32_t x0 = UINT32_MAX, y0 = UINT32_MAX, x1 = 0, y1 = 0;
  for (const auto& r : rects) {
    x0 = std::min(x0, r.x);
    y0 = std::min(y0, r.y);
    x1 = std::max(x1, r.x + r.w);
    y1 = std::max(y1, r.y + r.h);
  }
  if (x0 > x1) return {};
  return {x0, y0, x1 - x0, y1 - y0};
}

}  // namespace

std::string RfbClient::TakeOutput() {
  return std::exchange(out_, {});
}

std::vector<Update> RfbClient::TakeUpdates() {
  std::vector<Update> v(std::make_move_iterator(updates_.begin()),
                        std::make_move_iterator(updates_.end()));
  updates_.clear();
  return v;
}

void RfbClient::SendSetup() {
  out_.append({0, 0, 0, 0});    // SetPixelFormat + padding
  out_.append({32, 24, 0, 1});  // 32 bpp, depth 24, little-endian, true colour
  Put16(out_, 255);
  Put16(out_, 255);
  Put16(out_, 255);
  out_.append({16, 8, 0, 0, 0, 0});  // shifts R, G, B + padding
  out_.append({2, 0});               // SetEncodings + padding
  Put16(out_, 4);
  Put32(out_, static_cast<uint32_t>(kEncodingRaw));
  Put32(out_, static_cast<uint32_t>(kEncodingCopyRect));
  Put32(out_, static_cast<uint32_t>(kEncodingDesktopSize));
  Put32(out_, static_cast<uint32_t>(kEncodingFence));
  RequestUpdate(false);
}

void RfbClient::WriteFence(uint32_t flags, std::span<const uint8_t> payload) {
  out_.push_back(static_cast<char>(kMessageFence));
  out_.append({0, 0, 0});
  Put32(out_, flags);
  out_.push_back(static_cast<char>(payload.size()));
  out_.append(reinterpret_cast<const char*>(payload.data()), payload.size());
}

bool RfbClient::Fence(uint32_t id) {
  if (!ready_ || !fences_ || state_ == State::kFailed) return false;
  const uint8_t payload[4] = {static_cast<uint8_t>(id >> 24), static_cast<uint8_t>(id >> 16),
                              static_cast<uint8_t>(id >> 8), static_cast<uint8_t>(id)};
  WriteFence(kFenceRequest | kFenceBlockBefore, payload);
  return true;
}

void RfbClient::EndFence(std::span<const uint8_t> payload) {
  state_ = State::kMessageType;
  want_ = 1;
  fences_ = true;
  if (fence_flags_ & kFenceRequest) {
    // Everything before it is already processed, and nothing after it has been: answer at once
    // with the flags we honour, as RFB asks.
    WriteFence(fence_flags_ & (kFenceBlockBefore | kFenceBlockAfter | kFenceSyncNext), payload);
    return;
  }
  // An answer to one of ours; anything else (no request was ever sent with another payload) is
  // ignored.
  if (payload.size() == 4) fence_answered_ = U32(payload.data());
}

void RfbClient::RequestUpdate(bool incremental) {
  if (!incremental) {
    ++full_requests_;
    covered_ = 0;
  }
  out_.push_back(3);  // FramebufferUpdateRequest
  out_.push_back(incremental ? 1 : 0);
  Put16(out_, 0);
  Put16(out_, 0);
  Put16(out_, static_cast<uint16_t>(fb_.width));
  Put16(out_, static_cast<uint16_t>(fb_.height));
}

bool RfbClient::PointerEvent(uint8_t buttons, uint32_t x, uint32_t y) {
  if (!ready_ || state_ == State::kFailed) return false;
  out_.push_back(5);
  out_.push_back(static_cast<char>(buttons));
  Put16(out_, static_cast<uint16_t>(std::min(x, fb_.width - 1)));
  Put16(out_, static_cast<uint16_t>(std::min(y, fb_.height - 1)));
  return true;
}

bool RfbClient::KeyEvent(bool down, uint32_t keysym) {
  if (!ready_ || state_ == State::kFailed) return false;
  out_.push_back(4);
  out_.push_back(down ? 1 : 0);
  Put16(out_, 0);
  Put32(out_, keysym);
  return true;
}

void RfbClient::AddDamage(Rect r) {
  if (r.w == 0 || r.h == 0) return;
  if (damage_.size() < kMaxDamageRects) {
    damage_.push_back(r);
  } else {
    damage_.push_back(r);
    Rect b = Bounding(damage_);
    damage_.assign(1, b);
  }
}

void RfbClient::EndUpdate() {
  state_ = State::kMessageType;
  want_ = 1;
  if (!ready_) {
    // The first answer must cover the whole screen (a non-incremental request); ask again if
    // it did not, at most three times.
    if (covered_ < uint64_t{fb_.width} * fb_.height && !resized_) {
      if (full_requests_ >= 3) {
        state_ = State::kFailed;
        return;
      }
      RequestUpdate(false);
      damage_.clear();
      return;
    }
    ready_ = true;
    damage_.assign(1, Rect{0, 0, fb_.width, fb_.height});
  }
  ++seq_;
  updates_.push_back(Update{seq_, std::move(damage_), resized_});
  if (updates_.size() > kMaxPendingUpdates) updates_.pop_front();
  damage_.clear();
  // After a resize the new screen comes whole; otherwise only what changes.
  bool resized = std::exchange(resized_, false);
  if (resized) {
    ready_ = false;
    full_requests_ = 0;
  }
  RequestUpdate(!resized);
}

std::expected<void, Error> RfbClient::EndRect() {
  state_ = State::kRectHeader;
  want_ = 12;
  if (--rects_left_ == 0) {
    EndUpdate();
    if (state_ == State::kFailed)
      return std::unexpected(
          Error{ErrorCode::kProtocol, "the server did not send the whole screen"});
  }
  return {};
}

std::expected<void, Error> RfbClient::Feed(std::span<const uint8_t> bytes) {
  if (state_ == State::kFailed)
    return std::unexpected(Error{ErrorCode::kClosed, "the session has already failed"});
  size_t i = 0;
  while (i < bytes.size()) {
    if (state_ == State::kRectPixels) {
      // Raw pixels in our format, copied row by row straight into the framebuffer.
      const uint64_t row_bytes = uint64_t{rect_.w} * 4;
      uint64_t row = rect_offset_ / row_bytes, col = rect_offset_ % row_bytes;
      size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size() - i, row_bytes - col));
      size_t dst = ((size_t{rect_.y} + row) * fb_.width + rect_.x) * 4 + col;
      std::memcpy(fb_.bgrx.data() + dst, bytes.data() + i, n);
      i += n;
      rect_offset_ += n;
      if (rect_offset_ == row_bytes * rect_.h) {
        if (auto r = EndRect(); !r) {
          state_ = State::kFailed;
          return r;
        }
      }
      continue;
    }
    if (state_ == State::kCutText || state_ == State::kColourMapEntries ||
        state_ == State::kFailureReason || state_ == State::kName) {
      // Text and colour maps are skipped as they arrive; the desktop name and a refusal reason
      // keep their first 256 bytes.
      size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size() - i, skip_left_));
      if (state_ == State::kFailureReason || state_ == State::kName) {
        size_t room = name_.size() < 256 ? 256 - name_.size() : 0;
        name_.append(reinterpret_cast<const char*>(bytes.data() + i), std::min(n, room));
      }
      i += n;
      skip_left_ -= n;
      if (skip_left_ == 0) {
        if (state_ == State::kFailureReason) {
          state_ = State::kFailed;
          return std::unexpected(
              Error{ErrorCode::kRefused, "the server refused the connection: " + name_});
        }
        if (state_ == State::kName) SendSetup();
        state_ = State::kMessageType;
        want_ = 1;
      }
      continue;
    }
    size_t n = std::min(bytes.size() - i, static_cast<size_t>(want_) - buf_.size());
    buf_.insert(buf_.end(), bytes.begin() + static_cast<ptrdiff_t>(i),
                bytes.begin() + static_cast<ptrdiff_t>(i + n));
    i += n;
    if (buf_.size() == want_) {
      auto r = Step();
      buf_.clear();
      if (!r) {
        state_ = State::kFailed;
        return r;
      }
    }
  }
  return {};
}

std::expected<void, Error> RfbClient::Step() {
  const uint8_t* b = buf_.data();
  auto fail = [](ErrorCode code, std::string m) {
    return std::unexpected(Error{code, std::move(m)});
  };
  switch (state_) {
    case State::kVersion: {
      if (std::memcmp(b, "RFB 003.", 8) != 0 || b[11] != '\n' || !std::isdigit(b[8]) ||
          !std::isdigit(b[9]) || !std::isdigit(b[10]))
        return fail(ErrorCode::kProtocol, "not an RFB server");
      int minor = (b[8] - '0') * 100 + (b[9] - '0') * 10 + (b[10] - '0');
      if (minor < 8)
        return fail(ErrorCode::kUnsupported,
                    fmt::format("RFB 3.{} is too old (3.8 needed)", minor));
      out_ += "RFB 003.008\n";
      state_ = State::kSecurityCount;
      want_ = 1;
      return {};
    }
    case State::kSecurityCount:
      security_count_ = b[0];
      if (security_count_ == 0) {
        state_ = State::kSecurityResult;  // followed by a reason
        reading_reason_for_failure_ = true;
        want_ = 4;
        return {};
      }
      state_ = State::kSecurityTypes;
      want_ = security_count_;
      return {};
    case State::kSecurityTypes:
      if (std::find(b, b + security_count_, 1) == b + security_count_)
        return fail(ErrorCode::kUnsupported, "the server offers no security type 'None'");
      out_.push_back(1);
      state_ = State::kSecurityResult;
      want_ = 4;
      return {};
    case State::kSecurityResult: {
      uint32_t v = U32(b);
      if (reading_reason_for_failure_ || v != 0) {
        if (!reading_reason_for_failure_) {  // SecurityResult failed: a reason length follows
          reading_reason_for_failure_ = true;
          want_ = 4;
          return {};
        }
        if (v > kMaxServerText)
          return fail(ErrorCode::kRefused, "the server refused the connection (reason too long)");
        if (v == 0) return fail(ErrorCode::kRefused, "the server refused the connection");
        skip_left_ = v;
        name_.clear();
        state_ = State::kFailureReason;
        return {};
      }
      out_.push_back(1);  // ClientInit: shared
      state_ = State::kServerInit;
      want_ = 24;
      return {};
    }
    case State::kServerInit: {
      uint32_t w = U16(b), h = U16(b + 2), name_len = U32(b + 20);
      if (w == 0 || h == 0 || w > kMaxScreenSide || h > kMaxScreenSide)
        return fail(w == 0 || h == 0 ? ErrorCode::kProtocol : ErrorCode::kTooLarge,
                    fmt::format("screen size {}x{} is out of range", w, h));
      if (name_len > kMaxServerText) return fail(ErrorCode::kTooLarge, "desktop name too long");
      fb_.width = w;
      fb_.height = h;
      fb_.bgrx.assign(size_t{w} * h * 4, 0);
      name_.clear();
      if (name_len == 0) {
        SendSetup();
        state_ = State::kMessageType;
        want_ = 1;
      } else {
        state_ = State::kName;
        skip_left_ = name_len;
      }
      return {};
    }
    case State::kMessageType:
      switch (b[0]) {
        case 0:
          state_ = State::kUpdateHeader;
          want_ = 3;
          return {};
        case 1:
          state_ = State::kColourMapHeader;
          want_ = 5;
          return {};
        case 2:
          want_ = 1;
          return {};  // Bell
        case 3:
          state_ = State::kCutTextHeader;
          want_ = 7;
          return {};
        case kMessageFence:
          state_ = State::kFenceHeader;
          want_ = 8;
          return {};
        default:
          return fail(ErrorCode::kUnsupported, fmt::format("unknown server message type {}", b[0]));
      }
    case State::kUpdateHeader:
      rects_left_ = U16(b + 1);
      if (rects_left_ == 0) {
        // An empty update still answers our request: ask again.
        ++rects_left_;
        return EndRect();
      }
      state_ = State::kRectHeader;
      want_ = 12;
      return {};
    case State::kRectHeader: {
      Rect r{U16(b), U16(b + 2), U16(b + 4), U16(b + 6)};
      int32_t encoding = static_cast<int32_t>(U32(b + 8));
      if (encoding == kEncodingDesktopSize) {
        if (r.w == 0 || r.h == 0 || r.w > kMaxScreenSide || r.h > kMaxScreenSide)
          return fail(r.w == 0 || r.h == 0 ? ErrorCode::kProtocol : ErrorCode::kTooLarge,
                      fmt::format("new screen size {}x{} is out of range", r.w, r.h));
        fb_.width = r.w;
        fb_.height = r.h;
        fb_.bgrx.assign(size_t{r.w} * r.h * 4, 0);
        damage_.clear();
        resized_ = true;
        AddDamage(Rect{0, 0, r.w, r.h});
        return EndRect();
      }
      if (encoding != kEncodingRaw && encoding != kEncodingCopyRect)
        return fail(ErrorCode::kUnsupported,
                    fmt::format("the server used encoding {}, which was not asked for", encoding));
      if (uint64_t{r.x} + r.w > fb_.width || uint64_t{r.y} + r.h > fb_.height)
        return fail(ErrorCode::kProtocol,
                    fmt::format("rectangle {}x{}+{}+{} is outside the {}x{} screen", r.w, r.h, r.x,
                                r.y, fb_.width, fb_.height));
      rect_ = r;
      AddDamage(r);
      if (encoding == kEncodingCopyRect) {
        state_ = State::kCopyRectSource;
        want_ = 4;
        return {};
      }
      covered_ += r.area();
      rect_offset_ = 0;
      if (r.area() == 0) return EndRect();
      state_ = State::kRectPixels;
      return {};
    }
    case State::kCopyRectSource: {
      uint32_t sx = U16(b), sy = U16(b + 2);
      if (uint64_t{sx} + rect_.w > fb_.width || uint64_t{sy} + rect_.h > fb_.height)
        return fail(
            ErrorCode::kProtocol,
            fmt::format("copy source {}x{}+{}+{} is outside the screen", rect_.w, rect_.h, sx, sy));
      covered_ += rect_.area();
      const size_t row = size_t{rect_.w} * 4;
      auto at = [&](uint32_t x, uint32_t y) {
        return fb_.bgrx.data() + (size_t{y} * fb_.width + x) * 4;
      };
      // Overlapping source and destination: copy rows in the direction that reads before it writes.
      if (sy < rect_.y) {
        for (uint32_t k = rect_.h; k-- > 0;)
          std::memmove(at(rect_.x, rect_.y + k), at(sx, sy + k), row);
      } else {
        for (uint32_t k = 0; k < rect_.h; ++k)
          std::memmove(at(rect_.x, rect_.y + k), at(sx, sy + k), row);
      }
      return EndRect();
    }
    case State::kColourMapHeader: {
      uint32_t count = U16(b + 3);
      skip_left_ = uint64_t{count} * 6;
      state_ = skip_left_ ? State::kColourMapEntries : State::kMessageType;
      want_ = 1;
      return {};
    }
    case State::kCutTextHeader: {
      uint32_t len = U32(b + 3);
      if (len > kMaxServerText) return fail(ErrorCode::kTooLarge, "server cut text too long");
      skip_left_ = len;
      state_ = len ? State::kCutText : State::kMessageType;
      want_ = 1;
      return {};
    }
    case State::kFenceHeader: {
      fence_flags_ = U32(b + 3);
      uint8_t len = b[7];
      if (len > kMaxFencePayload)
        return fail(ErrorCode::kTooLarge,
                    fmt::format("fence payload of {} bytes (at most {})", len, kMaxFencePayload));
      if (len == 0) {
        EndFence({});
      } else {
        state_ = State::kFencePayload;
        want_ = len;
      }
      return {};
    }
    case State::kFencePayload:
      EndFence(std::span<const uint8_t>(b, want_));
      return {};
    default:
      return fail(ErrorCode::kProtocol, "internal: unexpected state");
  }
}

}  // namespace deskbox::vnc_bridge
