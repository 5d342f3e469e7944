#pragma once
// The one error type of computer_use: a code saying what kind of input was wrong, and the message
// the caller shows. Messages name the member (`actions[2].keys: unknown key 'Retrun'`) and are
// what deskboxd answers, word for word: clients and tests match on them.
#include <string>

namespace deskbox::computer_use {

enum class ErrorCode {
  kNotAnObject,      // a body, action or member that must be a JSON object is not one
  kMissingField,     // a required member is absent or null (action, type, x and y, text, keys…)
  kUnknownField,     // a member or query parameter the schema does not have
  kWrongType,        // a member of the wrong JSON type, where no more specific code fits
  kOutOfRange,       // a number or a list length outside its bounds (count, quality, settle…)
  kUnknownAction,    // an action name or type the schema does not have
  kBadCoordinate,    // a point that is not [x, y] / {"x", "y"} integers, or x without y
  kOutsideDisplay,   // a point that does not lie on the display
  kBadButton,        // a mouse button that is unknown or cannot be sent
  kBadKey,           // an unknown key name, or a malformed combo, sequence or key list
  kBadText,          // text that is missing its string, not UTF-8, too long, or has control chars
  kBadScroll,        // a scroll's direction, amount or wheel steps
  kBadDuration,      // a wait or hold_key duration
  kBadRegion,        // a zoom region that is malformed or not within the display
  kBadPath,          // a drag path that is not a list of 2 to kMaxPathPoints points
  kBadDisplay,       // a display size that is not WIDTHxHEIGHT / {"width", "height"} in range
  kBadImageFormat,   // an image format other than png or jpeg
};

// The code's name ("bad_key"), for logs and test output.
const char* ToString(ErrorCode code);

struct Error {
  ErrorCode code;
  std::string message;
};

}  // namespace deskbox::computer_use
