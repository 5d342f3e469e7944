#pragma once
// Screenshots from the mirrored framebuffer: crop, scale, PNG and JPEG.
#include <cstdint>
#include <expected>
#include <string>
#include <vector>

#include "vnc_bridge/error.h"
#include "vnc_bridge/rfb_client.h"

namespace deskbox::vnc_bridge {

struct RgbImage {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width*height*3, row-major, top to bottom
};

// The `crop` region of `fb` (the whole screen when its size is 0), scaled to `width`×`height`
// (0 = the crop's own size). Scaling down averages the source pixels each output pixel covers,
// so text stays legible; scaling up repeats pixels. Errors: an empty framebuffer, a crop
// outside it (kBadInput), a size above kMaxScreenSide (kTooLarge).
std::expected<RgbImage, Error> Render(const Framebuffer& fb, Rect crop, uint32_t width,
                                      uint32_t height);

// PNG: 8-bit RGB, zlib level 1. JPEG: libjpeg-turbo, 4:2:0, `quality` 1..100. Errors: an empty
// image (kBadInput), the encoder's failure (kEncode).
std::expected<std::string, Error> EncodePng(const RgbImage& image);
std::expected<std::string, Error> EncodeJpeg(const RgbImage& image, int quality);

}  // namespace deskbox::vnc_bridge
