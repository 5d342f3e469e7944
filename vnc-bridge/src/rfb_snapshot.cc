#include "vnc_bridge/rfb_snapshot.h"

#include <fmt/format.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace deskbox::vnc_bridge {

namespace {

uint16_t U16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
uint32_t U32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) << 24 | static_cast<uint32_t>(p[1]) << 16 | static_cast<uint32_t>(p[2]) << 8 | p[3];
}
void Put16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v >> 8));
  s.push_back(static_cast<char>(v));
}
void Put32(std::string& s, uint32_t v) {
  Put16(s, static_cast<uint16_t>(v >> 16));
  Put16(s, static_cast<uint16_t>(v));
}

}  // namespace

std::string RfbSnapshotClient::TakeOutput() { return std::exchange(out_, {}); }

void RfbSnapshotClient::SendSetup() {
  // Our pixel format, Raw only, and the whole screen.
  out_.append({0, 0, 0, 0});    // SetPixelFormat + padding
  out_.append({32, 24, 0, 1});  // 32 bpp, depth 24, little-endian, true colour
  Put16(out_, 255);
  Put16(out_, 255);
  Put16(out_, 255);
  out_.append({16, 8, 0, 0, 0, 0});  // shifts R, G, B + padding
  out_.append({2, 0});               // SetEncodings + padding
  Put16(out_, 1);
  Put32(out_, 0);  // Raw
  RequestFullUpdate();
}

void RfbSnapshotClient::RequestFullUpdate() {
  ++requests_;
  covered_ = 0;
  out_.push_back(3);  // FramebufferUpdateRequest
  out_.push_back(0);  // not incremental: the whole area, as it is now
  Put16(out_, 0);
  Put16(out_, 0);
  Put16(out_, static_cast<uint16_t>(image_.width));
  Put16(out_, static_cast<uint16_t>(image_.height));
}

std::expected<void, std::string> RfbSnapshotClient::Feed(std::span<const uint8_t> bytes) {
  if (state_ == State::kFailed) return std::unexpected(std::string("the session has already failed"));
  size_t i = 0;
  while (i < bytes.size() && state_ != State::kDone) {
    if (state_ == State::kRectPixels) {
      // Raw pixels, 4 bytes each (B, G, R, unused in our little-endian format), copied straight
      // into the image.
      size_t n = static_cast<size_t>(std::min<uint64_t>(bytes.size() - i, rect_bytes_left_));
      for (size_t k = 0; k < n; ++k, ++rect_offset_) {
        uint64_t pixel = rect_offset_ / 4;
        unsigned channel = static_cast<unsigned>(rect_offset_ % 4);
        if (channel == 3) continue;
        uint64_t x = rect_x_ + pixel % rect_w_, y = rect_y_ + pixel / rect_w_;
        image_.rgb[(y * image_.width + x) * 3 + (2 - channel)] = bytes[i + k];
      }
      i += n;
      rect_bytes_left_ -= n;
      if (rect_bytes_left_ == 0) {
        covered_ += uint64_t{rect_w_} * rect_h_;
        state_ = State::kRectHeader;
        want_ = 12;
        if (--rects_left_ == 0) {
          state_ = State::kMessageType;
          want_ = 1;
          if (covered_ >= uint64_t{image_.width} * image_.height) {
            state_ = State::kDone;
          } else if (requests_ >= 3) {
            state_ = State::kFailed;
            return std::unexpected(std::string("the server did not send the whole screen"));
          } else {
            RequestFullUpdate();
          }
        }
      }
      continue;
    }
    if (state_ == State::kCutText || state_ == State::kColourMapEntries || state_ == State::kFailureReason ||
        state_ == State::kName) {
      // Text and colour maps are skipped as they arrive; the desktop name and a refusal
      // reason keep their first 256 bytes.
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
          return std::unexpected("the server refused the connection: " + name_);
        }
        if (state_ == State::kName) SendSetup();
        state_ = State::kMessageType;
        want_ = 1;
      }
      continue;
    }
    size_t n = std::min(bytes.size() - i, static_cast<size_t>(want_) - buf_.size());
    buf_.insert(buf_.end(), bytes.begin() + static_cast<ptrdiff_t>(i), bytes.begin() + static_cast<ptrdiff_t>(i + n));
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

std::expected<void, std::string> RfbSnapshotClient::Step() {
  const uint8_t* b = buf_.data();
  auto fail = [](std::string m) { return std::unexpected(std::move(m)); };
  switch (state_) {
    case State::kVersion: {
      if (std::memcmp(b, "RFB 003.", 8) != 0 || b[11] != '\n' || !std::isdigit(b[8]) || !std::isdigit(b[9]) ||
          !std::isdigit(b[10]))
        return fail("not an RFB server");
      int minor = (b[8] - '0') * 100 + (b[9] - '0') * 10 + (b[10] - '0');
      if (minor < 8) return fail(fmt::format("RFB 3.{} is too old (3.8 needed)", minor));
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
        return fail("the server offers no security type 'None'");
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
        if (v > kMaxServerText) return fail("the server refused the connection (reason too long)");
        if (v == 0) return fail("the server refused the connection");
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
        return fail(fmt::format("screen size {}x{} is out of range", w, h));
      if (name_len > kMaxServerText) return fail("desktop name too long");
      image_.width = w;
      image_.height = h;
      image_.rgb.assign(size_t{w} * h * 3, 0);
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
        case 0: state_ = State::kUpdateHeader; want_ = 3; return {};
        case 1: state_ = State::kColourMapHeader; want_ = 5; return {};
        case 2: want_ = 1; return {};  // Bell
        case 3: state_ = State::kCutTextHeader; want_ = 7; return {};
        default: return fail(fmt::format("unknown server message type {}", b[0]));
      }
    case State::kUpdateHeader:
      rects_left_ = U16(b + 1);
      if (rects_left_ == 0) {
        state_ = State::kMessageType;
        want_ = 1;
        return {};
      }
      state_ = State::kRectHeader;
      want_ = 12;
      return {};
    case State::kRectHeader: {
      uint32_t x = U16(b), y = U16(b + 2), w = U16(b + 4), h = U16(b + 6);
      int32_t encoding = static_cast<int32_t>(U32(b + 8));
      if (encoding != 0) return fail(fmt::format("the server used encoding {}, not Raw", encoding));
      if (x + w > image_.width || y + h > image_.height)
        return fail(fmt::format("rectangle {}x{}+{}+{} is outside the {}x{} screen", w, h, x, y, image_.width, image_.height));
      rect_x_ = x;
      rect_y_ = y;
      rect_w_ = w;
      rect_h_ = h;
      rect_offset_ = 0;
      rect_bytes_left_ = uint64_t{w} * h * 4;
      if (rect_bytes_left_ == 0) {
        if (--rects_left_ == 0) {
          state_ = State::kMessageType;
          want_ = 1;
        }
        return {};
      }
      state_ = State::kRectPixels;
      return {};
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
      if (len > kMaxServerText) return fail("server cut text too long");
      skip_left_ = len;
      state_ = len ? State::kCutText : State::kMessageType;
      want_ = 1;
      return {};
    }
    default: return fail("internal: unexpected state");
  }
}

std::expected<std::string, std::string> EncodePng(const RgbImage& image) {
  if (image.width == 0 || image.height == 0 || image.rgb.size() != size_t{image.width} * image.height * 3)
    return std::unexpected(std::string("no image"));
  // Filter type 0 (None) before each row, then zlib.
  std::string raw;
  raw.reserve((size_t{image.width} * 3 + 1) * image.height);
  for (uint32_t y = 0; y < image.height; ++y) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(image.rgb.data()) + size_t{y} * image.width * 3, size_t{image.width} * 3);
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 1) != Z_OK)
    return std::unexpected(std::string("zlib failed"));
  z.resize(zlen);
  std::string png = "\x89PNG\r\n\x1a\n";
  auto chunk = [&png](const char* type, const std::string& data) {
    Put32(png, static_cast<uint32_t>(data.size()));
    std::string td = std::string(type, 4) + data;
    png += td;
    Put32(png, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(td.data()), static_cast<uInt>(td.size()))));
  };
  std::string ihdr;
  Put32(ihdr, image.width);
  Put32(ihdr, image.height);
  ihdr.append({8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, filter 0, no interlace
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", "");
  return png;
}

std::expected<std::string, std::string> EncodeJpeg(const RgbImage& image, int quality) {
  if (image.width == 0 || image.height == 0 || image.rgb.size() != size_t{image.width} * image.height * 3)
    return std::unexpected(std::string("no image"));
  tjhandle tj = tjInitCompress();
  if (!tj) return std::unexpected(std::string("libjpeg-turbo: ") + tjGetErrorStr());
  unsigned char* out = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, image.rgb.data(), static_cast<int>(image.width), 0, static_cast<int>(image.height), TJPF_RGB,
                       &out, &size, TJSAMP_420, std::clamp(quality, 1, 100), TJFLAG_FASTDCT);
  std::string result;
  if (rc == 0) result.assign(reinterpret_cast<const char*>(out), size);
  std::string err = rc == 0 ? "" : tjGetErrorStr2(tj);
  tjFree(out);
  tjDestroy(tj);
  if (rc != 0) return std::unexpected("libjpeg-turbo: " + err);
  return result;
}

}  // namespace deskbox::vnc_bridge
