#pragma once
// ClientFilter: the viewer → guest half of the live view. A browser viewer (noVNC) speaks RFB to
// the guest's Xvnc through deskboxd; every byte it sends passes this parser first. The filter
// follows the client side of the RFB 3.8 handshake and then the client messages, and forwards
// only what is allowed:
//  - a view-only viewer's KeyEvent, PointerEvent, QEMU key event and ClientCutText are dropped
//    (counted, so they can be attributed in the event log);
//  - the ClientInit shared flag is forced to 1: no viewer can disconnect the others;
//  - SetDesktopSize and xvp (shutdown/reboot) are dropped for everyone: the sandbox's screen
//    size is the API's to set, and the guest's power is not the viewer's;
//  - anything else a browser viewer has no reason to send (an unknown message type, a security
//    type other than None, a protocol other than 3.3/3.7/3.8, oversized fields) ends the
//    connection with the cause.
// Sans-I/O: bytes in, bytes out; a message's bytes may arrive split anywhere. Memory is bounded:
// at most one fixed-size message header is buffered, and cut text is streamed, not held.
#include <cstddef>
#include <cstdint>
#include <expected>
#include <span>
#include <string>

#include "vnc_bridge/error.h"

namespace deskbox::vnc_bridge {

inline constexpr uint32_t kMaxViewerCutText = 1u << 20;  // ClientCutText / extended clipboard
inline constexpr uint16_t kMaxViewerEncodings = 256;      // SetEncodings entries
inline constexpr uint8_t kMaxViewerFenceBytes = 64;       // ClientFence payload (RFB says ≤ 64)

class ClientFilter {
 public:
  // Input messages seen since the last TakeCounts(), by kind.
  struct Counts {
    uint32_t pointer = 0;    // PointerEvent
    uint32_t key = 0;        // KeyEvent and QEMU extended key events
    uint32_t clipboard = 0;  // ClientCutText
    bool any() const { return pointer || key || clipboard; }
  };

  explicit ClientFilter(bool may_control) : may_control_(may_control) {}

  // Parses `in` and appends what may reach the guest to `out`. After an error (kUnsupported: a
  // version, security type or message not offered; kTooLarge: a field over its cap) the filter
  // stays failed, feeding it more is kClosed, and the connection must be closed.
  std::expected<void, Error> Feed(std::span<const uint8_t> in, std::string& out);

  Counts TakeCounts() {
    Counts c = counts_;
    counts_ = {};
    return c;
  }
  bool may_control() const { return may_control_; }
  // True once the handshake is through and client messages are being parsed.
  bool in_messages() const { return state_ == State::kMessage || state_ == State::kBody || state_ == State::kSkip; }

 private:
  enum class State { kVersion, kSecurity, kClientInit, kMessage, kBody, kSkip, kFailed };
  std::expected<void, Error> Fail(ErrorCode code, std::string why);
  // With the first `have_` bytes of a message in `head_`: how long the fixed part is (0 = need
  // more bytes to know), or an error.
  std::expected<size_t, Error> HeaderLength() const;
  std::expected<void, Error> Complete(std::string& out);

  bool may_control_;
  State state_ = State::kVersion;
  bool v33_ = false;      // RFB 3.3: the server picks the security type; the client sends none
  uint8_t head_[32]{};    // the fixed part of the current message (≤ 24 bytes)
  size_t have_ = 0;
  uint64_t body_left_ = 0;  // bytes of a variable part still to pass (kBody) or drop (kSkip)
  Counts counts_;
};

}  // namespace deskbox::vnc_bridge
