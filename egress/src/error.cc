#include "egress/error.h"

namespace deskbox::egress {

const char* ToString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kBadPolicy:
      return "bad_policy";
    case ErrorCode::kMalformed:
      return "malformed";
    case ErrorCode::kTruncated:
      return "truncated";
    case ErrorCode::kRefused:
      return "refused";
    case ErrorCode::kUpstream:
      return "upstream";
    case ErrorCode::kIo:
      return "io";
    case ErrorCode::kTimeout:
      return "timeout";
    case ErrorCode::kStopping:
      return "stopping";
  }
  return "?";
}

}  // namespace deskbox::egress
