#pragma once
// The one error type of cdp_proxy: a code saying what kind of failure it is, and the message
// that names it. Messages are what deskboxd answers word for word ("the sandbox's browser gave a
// bad /json/list: ..."): clients and tests match on them.
#include <string>

namespace deskbox::cdp_proxy {

enum class ErrorCode {
  kBadJson,    // a /json answer of the guest that is not what it must be: over its size or
               // nesting cap, not JSON, the wrong shape, or without valid ids (guest_json.h)
  kGuest,      // the guest's DevTools server: it refused the connection, or answered with no
               // usable HTTP (malformed, its head or body over the limit)
  kIo,         // no socket into the sandbox could be made, or sending the request failed
  kClosed,     // the guest side is gone: the sandbox is not running (or stopped while its pages
               // reloaded), or the connection ended or failed before the whole answer
  kTimeout,    // no connection, no reloaded browser or no whole answer before the deadline
  kBadTarget,  // GuestHttp was given a target that is not a plain path of visible ASCII
};

// The code's name ("bad_json"), for logs and test output.
const char* ToString(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

}  // namespace deskbox::cdp_proxy
