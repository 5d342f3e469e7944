#pragma once
// RfbSnapshotClient: the RFB client side (RFC 6143, protocol 3.8, security "None") that takes one
// full picture of a guest's screen. Sans-I/O: Feed() takes whatever bytes the server sent,
// Output() says what to send back. The server is the guest's Xvnc, so every byte is hostile:
// sizes are checked before anything is allocated (screen at most 4096×4096), pixel data is
// copied row by row into the image as it arrives (never buffered whole), text the server sends
// (desktop name, cut text, refusal reasons) is capped and skipped, and anything unexpected —
// an encoding we did not ask for, a rectangle outside the screen, an unknown message — ends
// the session with an error.
//
// It asks for 32-bit true colour (little-endian, 8 bits per channel) and Raw encoding only,
// then one non-incremental update of the whole screen.
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <vector>

namespace deskbox::vnc_bridge {

inline constexpr uint32_t kMaxScreenSide = 4096;
inline constexpr uint32_t kMaxServerText = 1 << 20;  // cut text, reasons: skipped, at most this

struct RgbImage {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width*height*3, row-major, top to bottom
};

class RfbSnapshotClient {
 public:
  // Consumes all of `bytes`. Returns an error when the server breaks the protocol; the client is
  // then finished.
  std::expected<void, std::string> Feed(std::span<const uint8_t> bytes);
  // Bytes to send to the server now (cleared by the call).
  std::string TakeOutput();
  bool done() const { return state_ == State::kDone; }
  const RgbImage& image() const { return image_; }
  const std::string& desktop_name() const { return name_; }

 private:
  enum class State {
    kVersion, kSecurityCount, kSecurityTypes, kSecurityResult, kFailureReason, kServerInit, kName,
    kMessageType, kUpdateHeader, kRectHeader, kRectPixels, kColourMapHeader, kColourMapEntries,
    kCutTextHeader, kCutText, kDone, kFailed,
  };
  std::expected<void, std::string> Step();  // advances while buffered bytes allow
  void RequestFullUpdate();
  void SendSetup();

  State state_ = State::kVersion;
  std::vector<uint8_t> buf_;  // bytes not yet consumed (headers only; pixels are copied through)
  std::string out_;
  RgbImage image_;
  std::string name_;
  uint32_t want_ = 12;         // bytes the current state needs
  uint32_t security_count_ = 0;
  uint16_t rects_left_ = 0;
  uint32_t rect_x_ = 0, rect_y_ = 0, rect_w_ = 0, rect_h_ = 0;
  uint64_t rect_bytes_left_ = 0;
  uint64_t rect_offset_ = 0;   // bytes of the current rectangle already copied
  uint64_t skip_left_ = 0;     // bytes of text or colour map still to skip
  uint64_t covered_ = 0;       // pixels received since the last request
  int requests_ = 0;
  bool reading_reason_for_failure_ = false;
};

// Encoders for screenshots. PNG: 8-bit RGB, zlib. JPEG: libjpeg-turbo, 4:2:0, `quality` 1..100.
std::expected<std::string, std::string> EncodePng(const RgbImage& image);
std::expected<std::string, std::string> EncodeJpeg(const RgbImage& image, int quality);

}  // namespace deskbox::vnc_bridge
