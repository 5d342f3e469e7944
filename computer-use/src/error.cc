#include "computer_use/error.h"

namespace deskbox::computer_use {

const char* ToString(ErrorCode code) {
  switch (code) {
    case ErrorCode::kNotAnObject:
      return "not_an_object";
    case ErrorCode::kMissingField:
      return "missing_field";
    case ErrorCode::kUnknownField:
      return "unknown_field";
    case ErrorCode::kWrongType:
      return "wrong_type";
    case ErrorCode::kOutOfRange:
      return "out_of_range";
    case ErrorCode::kUnknownAction:
      return "unknown_action";
    case ErrorCode::kBadCoordinate:
      return "bad_coordinate";
    case ErrorCode::kOutsideDisplay:
      return "outside_display";
    case ErrorCode::kBadButton:
      return "bad_button";
    case ErrorCode::kBadKey:
      return "bad_key";
    case ErrorCode::kBadText:
      return "bad_text";
    case ErrorCode::kBadScroll:
      return "bad_scroll";
    case ErrorCode::kBadDuration:
      return "bad_duration";
    case ErrorCode::kBadRegion:
      return "bad_region";
    case ErrorCode::kBadPath:
      return "bad_path";
    case ErrorCode::kBadDisplay:
      return "bad_display";
    case ErrorCode::kBadImageFormat:
      return "bad_image_format";
  }
  return "?";
}

}  // namespace deskbox::computer_use
