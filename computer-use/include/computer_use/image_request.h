#pragma once
// What image a call wants back: format, JPEG quality and, for screenshots, an explicit size.
#include <cstdint>
#include <string_view>

#include "computer_use/display.h"

namespace deskbox::computer_use {

enum class ImageFormat { kPng, kJpeg };

// "png" / "jpeg": the name in answers ({"format": …}) and in media types.
std::string_view ToString(ImageFormat format);
// "image/png" / "image/jpeg".
std::string_view MediaType(ImageFormat format);

struct ImageRequest {
  ImageFormat format = ImageFormat::kPng;
  int quality = 80;                // JPEG, 1..100
  uint32_t width = 0, height = 0;  // an explicit size (screenshots); 0: the display's
};

// The size to render: the explicit one, where only one side is given the other keeps the
// display's aspect ratio (at least 1), and without either the display's own size.
DisplaySize ImageSize(const ImageRequest& request, const Display& display);

}  // namespace deskbox::computer_use
