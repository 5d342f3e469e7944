#include "desktop_images/agent_frame.h"

#include <algorithm>
#include <climits>

#include <google/protobuf/message_lite.h>

namespace deskbox::desktop_images {

std::string_view FrameErrorName(FrameError error) {
  switch (error) {
    case FrameError::kEmptyFrame:
      return "empty frame";
    case FrameError::kFrameTooLarge:
      return "frame too large";
    case FrameError::kSerializeFailed:
      return "serialize failed";
    case FrameError::kParseFailed:
      return "payload does not parse";
  }
  return "unknown frame error";
}

std::expected<std::string, FrameError> EncodeFrame(const google::protobuf::MessageLite& message,
                                                   size_t max_frame_bytes) {
  const size_t size = message.ByteSizeLong();
  if (size == 0) return std::unexpected(FrameError::kEmptyFrame);
  if (size > max_frame_bytes || size > UINT32_MAX) {
    return std::unexpected(FrameError::kFrameTooLarge);
  }
  std::string frame(kFrameHeaderBytes + size, '\0');
  frame[0] = static_cast<char>((size >> 24) & 0xff);
  frame[1] = static_cast<char>((size >> 16) & 0xff);
  frame[2] = static_cast<char>((size >> 8) & 0xff);
  frame[3] = static_cast<char>(size & 0xff);
  if (!message.SerializeToArray(frame.data() + kFrameHeaderBytes, static_cast<int>(size))) {
    return std::unexpected(FrameError::kSerializeFailed);
  }
  return frame;
}

FrameReader::FrameReader(size_t max_frame_bytes)
    : max_frame_bytes_(std::min<size_t>(max_frame_bytes, UINT32_MAX)) {}

size_t FrameReader::Feed(std::span<const uint8_t> bytes) {
  if (error_) return 0;
  size_t taken = 0;
  if (header_filled_ < kFrameHeaderBytes) {
    const size_t n = std::min(kFrameHeaderBytes - header_filled_, bytes.size());
    std::copy_n(bytes.begin(), n, header_ + header_filled_);
    header_filled_ += n;
    taken += n;
    if (header_filled_ < kFrameHeaderBytes) return taken;
    payload_length_ = (size_t{header_[0]} << 24) | (size_t{header_[1]} << 16) |
                      (size_t{header_[2]} << 8) | size_t{header_[3]};
    // Decide on the length as soon as it is known, so a bad one is reported without waiting
    // for (or buffering) any of its payload.
    if (payload_length_ == 0) {
      error_ = FrameError::kEmptyFrame;
      return taken;
    }
    if (payload_length_ > max_frame_bytes_) {
      error_ = FrameError::kFrameTooLarge;
      return taken;
    }
  }
  // Only the bytes that belong to this frame; the rest waits for the next Feed().
  const size_t want = payload_length_ - payload_.size();
  const size_t n = std::min(want, bytes.size() - taken);
  if (payload_.size() + n > payload_.capacity()) {
    // Grow geometrically but never past the declared length, so the buffer stays within one
    // frame even for a length that is announced and then trickled in.
    payload_.reserve(std::min(payload_length_, std::max(2 * payload_.capacity(), payload_.size() + n)));
  }
  payload_.append(reinterpret_cast<const char*>(bytes.data() + taken), n);
  return taken + n;
}

std::expected<std::optional<std::string>, FrameError> FrameReader::Next() {
  if (error_) return std::unexpected(*error_);
  if (header_filled_ < kFrameHeaderBytes || payload_.size() < payload_length_) {
    return std::optional<std::string>();
  }
  std::string payload = std::move(payload_);
  payload_ = std::string();  // a moved-from string is valid but unspecified; make it empty
  header_filled_ = 0;
  payload_length_ = 0;
  return std::optional<std::string>(std::move(payload));
}

void FrameReader::Reset() {
  header_filled_ = 0;
  payload_length_ = 0;
  payload_ = std::string();  // also gives back the capacity of a large partial frame
  error_.reset();
}

namespace {

template <typename Message>
std::expected<Message, FrameError> Parse(std::string_view payload) {
  Message message;
  if (payload.size() > INT_MAX ||
      !message.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return std::unexpected(FrameError::kParseFailed);
  }
  return message;
}

}  // namespace

std::expected<deskbox::agent::v1::Request, FrameError> ParseRequest(std::string_view payload) {
  return Parse<deskbox::agent::v1::Request>(payload);
}

std::expected<deskbox::agent::v1::Response, FrameError> ParseResponse(std::string_view payload) {
  return Parse<deskbox::agent::v1::Response>(payload);
}

}  // namespace deskbox::desktop_images
