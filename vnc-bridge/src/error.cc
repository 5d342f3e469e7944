#include "vnc_bridge/error.h"

namespace deskbox::vnc_bridge {

const char* ToString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kProtocol:
      return "protocol";
    case ErrorCode::kTooLarge:
      return "too_large";
    case ErrorCode::kUnsupported:
      return "unsupported";
    case ErrorCode::kRefused:
      return "refused";
    case ErrorCode::kClosed:
      return "closed";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kBadInput:
      return "bad_input";
    case ErrorCode::kEncode:
      return "encode";
  }
  return "?";
}

}  // namespace deskbox::vnc_bridge
