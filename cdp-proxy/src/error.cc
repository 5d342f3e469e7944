#include "cdp_proxy/error.h"

namespace deskbox::cdp_proxy {

const char* ToString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadJson:
      return "bad_json";
    case ErrorCode::kGuest:
      return "guest";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kClosed:
      return "closed";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kBadTarget:
      return "bad_target";
  }
  return "?";
}

}  // namespace deskbox::cdp_proxy
