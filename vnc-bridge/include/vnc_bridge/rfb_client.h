#pragma once
// RfbClient: the client side of one long-lived RFB session (RFC 6143, protocol 3.8, security
// "None") that mirrors a guest's screen. Sans-I/O: Feed() takes whatever bytes the server sent,
// TakeOutput() gives what to send back; FrameMirror (mirror.h) does the I/O.
//
// The server is the guest's Xvnc, so every byte is hostile: the screen size is checked before
// anything is allocated (at most kMaxScreenSide per side), pixels are copied row by row into the
// framebuffer as they arrive (never buffered whole), rectangles and copy sources must lie inside
// the screen, text the server sends (desktop name, cut text, refusal reasons) is capped and
// skipped, and anything unexpected — an encoding we did not ask for, an unknown message — ends
// the session with an error.
//
// It asks for 32-bit true colour, little-endian with red at bit 16 (in memory B, G, R, X: what
// TurboJPEG calls BGRX), the encodings Raw and CopyRect, and the DesktopSize and Fence
// pseudo-encodings. Fences (message 248) go both ways: the server's requests are answered at
// once, in stream order; Fence() asks the server to answer once it has processed everything
// sent before — how the mirror knows that a click has reached the X server before it sends the
// next one of a double click.
// Raw because the guest runs under TCG, where every byte Xvnc compresses costs emulated CPU,
// while the link is a local tap. After the first whole-screen update it keeps exactly one
// incremental update request outstanding, so each change in the guest arrives as soon as Xvnc
// sends it; every completed FramebufferUpdate advances seq() and records its damage.
#include <cstdint>
#include <deque>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vnc_bridge/error.h"

namespace deskbox::vnc_bridge {

inline constexpr uint32_t kMaxScreenSide = 4096;
inline constexpr uint32_t kMaxServerText = 1 << 20;  // cut text, reasons: skipped, at most this
inline constexpr size_t kMaxDamageRects = 64;        // per update; beyond, their bounding box
inline constexpr size_t kMaxPendingUpdates = 256;    // not yet taken; the oldest are dropped
inline constexpr uint8_t kMaxFencePayload = 64;      // RFB's limit for a fence's payload

struct Rect {
  uint32_t x = 0, y = 0, w = 0, h = 0;
  uint64_t area() const { return uint64_t{w} * h; }
  bool operator==(const Rect&) const = default;
};

// The mirrored screen: 4 bytes per pixel, B G R X, row-major, top to bottom.
struct Framebuffer {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> bgrx;
};

// One completed FramebufferUpdate.
struct Update {
  uint64_t seq = 0;
  std::vector<Rect> damage;
  bool resized = false;
};

class RfbClient {
 public:
  // Consumes all of `bytes`. Returns an error when the server breaks the protocol (kProtocol),
  // exceeds a cap (kTooLarge), uses what was not asked for (kUnsupported) or refuses us
  // (kRefused); the client is then finished, and feeding it more is kClosed.
  std::expected<void, Error> Feed(std::span<const uint8_t> bytes);
  // Bytes to send to the server now (cleared by the call).
  std::string TakeOutput();
  size_t output_size() const { return out_.size(); }

  // The handshake is done and the whole screen has arrived at least once.
  bool ready() const { return ready_; }
  bool failed() const { return state_ == State::kFailed; }
  // Completed updates so far (the first whole-screen one included).
  uint64_t seq() const { return seq_; }
  const Framebuffer& framebuffer() const { return fb_; }
  const std::string& desktop_name() const { return name_; }
  // Updates completed since the last call, oldest first.
  std::vector<Update> TakeUpdates();

  // Client → server input, queued to the output. Only once ready(): before, these return false
  // and send nothing. Coordinates are clamped to the screen.
  bool PointerEvent(uint8_t buttons, uint32_t x, uint32_t y);
  bool KeyEvent(bool down, uint32_t keysym);

  // The server has shown that it does fences (it sent one).
  bool fences() const { return fences_; }
  // Queues a ClientFence (Request, BlockBefore) carrying `id`: the server answers once every
  // message sent before it has taken effect. False, sending nothing, before ready() or when the
  // server does not do fences.
  bool Fence(uint32_t id);
  // The id of the last fence of ours the server answered (0: none yet).
  uint32_t fence_answered() const { return fence_answered_; }

 private:
  enum class State {
    kVersion,
    kSecurityCount,
    kSecurityTypes,
    kSecurityResult,
    kFailureReason,
    kServerInit,
    kName,
    kMessageType,
    kUpdateHeader,
    kRectHeader,
    kRectPixels,
    kCopyRectSource,
    kColourMapHeader,
    kColourMapEntries,
    kCutTextHeader,
    kCutText,
    kFenceHeader,
    kFencePayload,
    kFailed,
  };
  std::expected<void, Error> Step();  // acts on a complete header in buf_
  std::expected<void, Error> EndRect();
  void EndUpdate();
  void SendSetup();
  void RequestUpdate(bool incremental);
  void AddDamage(Rect r);
  void EndFence(std::span<const uint8_t> payload);
  void WriteFence(uint32_t flags, std::span<const uint8_t> payload);  // a ClientFence

  State state_ = State::kVersion;
  std::vector<uint8_t> buf_;  // header bytes not yet consumed (pixels are copied through)
  std::string out_;
  Framebuffer fb_;
  std::string name_;
  uint32_t want_ = 12;  // bytes the current state needs
  uint32_t security_count_ = 0;
  bool reading_reason_for_failure_ = false;
  uint16_t rects_left_ = 0;
  Rect rect_;
  uint64_t rect_offset_ = 0;  // bytes of the current rectangle already copied
  uint64_t skip_left_ = 0;    // bytes of text or colour map still to skip
  // The update being received.
  std::vector<Rect> damage_;
  bool resized_ = false;
  uint64_t covered_ = 0;  // pixels received by the first (whole-screen) update
  int full_requests_ = 0;
  bool ready_ = false;
  uint64_t seq_ = 0;
  std::deque<Update> updates_;
  bool fences_ = false;
  uint32_t fence_flags_ = 0;  // of the fence being received
  uint32_t fence_answered_ = 0;
};

}  // namespace deskbox::vnc_bridge
