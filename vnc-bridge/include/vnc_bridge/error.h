#pragma once
// The one error type of vnc_bridge: a code saying what kind of failure it is, and the message
// that names it. Messages are what deskboxd answers, logs and puts in close frames word for
// word ("unknown key 'Retrun'"): clients and tests match on them.
#include <string>

namespace deskbox::vnc_bridge {

enum class ErrorCode {
  kProtocol,     // an RFB stream that breaks the protocol: not RFB, a zero screen size, a
                 // rectangle or copy source off the screen, a first update short of the screen
  kTooLarge,     // a bound hit: a screen size, text, fence payload or viewer field over its cap,
                 // output the guest does not read, a crop scaled beyond kMaxScreenSide, too many
                 // viewers connecting at once
  kUnsupported,  // what was not asked for or offered: an RFB version, a security type, an
                 // encoding, a message type or QEMU subtype
  kRefused,      // the guest's RFB server refused the connection (and may have said why)
  kClosed,       // the session is over: stopped, ended by the other side, failed before, or the
                 // sandbox no longer running
  kIo,           // the connection failed other than by ending: connect, read, write
  kTimeout,      // no whole screen, or no RFB greeting, in time
  kBadInput,     // a caller's input: a key name, combo or sequence, text that is not UTF-8, an
                 // action that fails Validate, a crop off the frame, no frame or image at all
  kEncode,       // zlib or libjpeg-turbo could not encode the image
};

// The code's name ("too_large"), for logs and test output.
const char* ToString(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

}  // namespace deskbox::vnc_bridge
