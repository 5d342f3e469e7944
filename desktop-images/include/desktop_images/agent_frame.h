// Framing of the guest agent channel (desktop-images/proto/agent.proto), shared by the host
// (vmhost) and the guest agent.
//
// A frame is a 4-byte big-endian length N followed by N bytes of a serialized Request (host to
// guest) or Response (guest to host), with 1 <= N <= kMaxFrameBytes. Anything else is a protocol
// error after which the receiver closes the channel: a stream has no way to find the next frame
// boundary once a length is wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "agent.pb.h"

namespace google::protobuf {
class MessageLite;
}

namespace deskbox::desktop_images {

inline constexpr size_t kFrameHeaderBytes = 4;
inline constexpr size_t kMaxFrameBytes = 16u * 1024 * 1024;  // payload bytes, header excluded

enum class FrameError {
  kEmptyFrame,       // length 0 (or encoding a message that serializes to nothing)
  kFrameTooLarge,    // length > the maximum
  kSerializeFailed,  // the message could not be serialized
  kParseFailed,      // the payload is not a valid message of the expected type
};

std::string_view FrameErrorName(FrameError error);

// Serializes `message` and prefixes its length. Fails for empty messages (a Request or Response
// always has its `kind` set, so a real one is never empty) and for ones over kMaxFrameBytes.
std::expected<std::string, FrameError> EncodeFrame(const google::protobuf::MessageLite& message,
                                                   size_t max_frame_bytes = kMaxFrameBytes);

// Incremental frame parser. Never blocks, never trusts the length field beyond its limit, and
// never holds more than one frame (header + max_frame_bytes).
//
// Feed() takes bytes only up to the end of the current frame and returns how many it took; it
// takes nothing while a complete frame waits to be collected with Next(), or once the reader
// has failed. The usual loop is:
//
//   while (!bytes.empty()) {
//     bytes = bytes.subspan(reader.Feed(bytes));
//     auto next = reader.Next();
//     if (!next) { /* protocol error: close the channel */ }
//     else if (*next) { /* handle **next */ }
//   }
//
// After an error the reader stays failed (Feed takes nothing, Next repeats the error) until
// Reset(), which is what a new connection does.
class FrameReader {
 public:
  explicit FrameReader(size_t max_frame_bytes = kMaxFrameBytes);

  size_t Feed(std::span<const uint8_t> bytes);
  size_t Feed(std::string_view bytes) {
    return Feed(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
  }

  // A complete payload, std::nullopt if more bytes are needed, or the (sticky) error.
  std::expected<std::optional<std::string>, FrameError> Next();

  // Drops any partial frame and a sticky error.
  void Reset();

  bool failed() const { return error_.has_value(); }
  // Bytes currently held: header bytes plus payload bytes of the current frame.
  size_t buffered_bytes() const { return header_filled_ + payload_.size(); }
  // True between the first byte of a frame and its collection by Next().
  bool mid_frame() const { return buffered_bytes() > 0; }
  size_t max_frame_bytes() const { return max_frame_bytes_; }

 private:
  size_t max_frame_bytes_;
  uint8_t header_[kFrameHeaderBytes] = {};
  size_t header_filled_ = 0;
  size_t payload_length_ = 0;  // valid once header_filled_ == kFrameHeaderBytes
  std::string payload_;
  std::optional<FrameError> error_;
};

std::expected<deskbox::agent::v1::Request, FrameError> ParseRequest(std::string_view payload);
std::expected<deskbox::agent::v1::Response, FrameError> ParseResponse(std::string_view payload);

}  // namespace deskbox::desktop_images
