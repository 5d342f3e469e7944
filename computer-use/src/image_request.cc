#include "computer_use/image_request.h"

#include <algorithm>

namespace deskbox::computer_use {

std::string_view ToString(ImageFormat format) {
  return format == ImageFormat::kPng ? "png" : "jpeg";
}

std::string_view MediaType(ImageFormat format) {
  return format == ImageFormat::kPng ? "image/png" : "image/jpeg";
}

DisplaySize ImageSize(const ImageRequest& request, const Display& display) {
  uint32_t w = request.width, h = request.height;
  // A display with no pixels has no aspect ratio: the given side stays alone (Render refuses 0).
  if (display.w() && display.h()) {
    if (w && !h)
      h = std::max<uint32_t>(1, static_cast<uint32_t>(uint64_t{w} * display.h() / display.w()));
    if (h && !w)
      w = std::max<uint32_t>(1, static_cast<uint32_t>(uint64_t{h} * display.w() / display.h()));
  }
  return {w ? w : display.w(), h ? h : display.h()};
}

}  // namespace deskbox::computer_use
