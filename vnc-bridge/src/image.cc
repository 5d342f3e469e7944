#include "vnc_bridge/image.h"

#include <fmt/format.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <algorithm>

#include "big_endian.h"

namespace deskbox::vnc_bridge {

std::expected<RgbImage, Error> Render(const Framebuffer& fb, Rect crop, uint32_t width,
                                      uint32_t height) {
  if (fb.width == 0 || fb.height == 0 || fb.bgrx.size() != size_t{fb.width} * fb.height * 4)
    return std::unexpected(Error{ErrorCode::kBadInput, "no frame"});
  if (crop.w == 0 || crop.h == 0) crop = Rect{0, 0, fb.width, fb.height};
  if (uint64_t{crop.x} + crop.w > fb.width || uint64_t{crop.y} + crop.h > fb.height)
    return std::unexpected(Error{
        ErrorCode::kBadInput, fmt::format("region {}x{}+{}+{} is outside the {}x{} screen", crop.w,
                                          crop.h, crop.x, crop.y, fb.width, fb.height)});
  if (width == 0) width = crop.w;
  if (height == 0) height = crop.h;
  if (width > kMaxScreenSide || height > kMaxScreenSide)
    return std::unexpected(
        Error{ErrorCode::kTooLarge, fmt::format("image size {}x{} is above {}x{}", width, height,
                                                kMaxScreenSide, kMaxScreenSide)});
  RgbImage img;
  img.width = width;
  img.height = height;
  img.rgb.resize(size_t{width} * height * 3);
  uint8_t* out = img.rgb.data();
  if (width == crop.w && height == crop.h) {
    for (uint32_t y = 0; y < height; ++y) {
      const uint8_t* s = fb.bgrx.data() + (size_t{crop.y + y} * fb.width + crop.x) * 4;
      for (uint32_t x = 0; x < width; ++x, s += 4, out += 3) {
        out[0] = s[2];
        out[1] = s[1];
        out[2] = s[0];
      }
    }
    return img;
  }
  // Each output pixel averages the block of source pixels it covers (at least one).
  std::vector<uint32_t> x0(width), x1(width);
  for (uint32_t x = 0; x < width; ++x) {
    x0[x] = static_cast<uint32_t>(uint64_t{x} * crop.w / width);
    x1[x] = std::max(x0[x] + 1, static_cast<uint32_t>(uint64_t{x + 1} * crop.w / width));
  }
  for (uint32_t y = 0; y < height; ++y) {
    uint32_t y0 = static_cast<uint32_t>(uint64_t{y} * crop.h / height);
    uint32_t y1 = std::max(y0 + 1, static_cast<uint32_t>(uint64_t{y + 1} * crop.h / height));
    for (uint32_t x = 0; x < width; ++x, out += 3) {
      uint32_t b = 0, g = 0, r = 0;
      for (uint32_t sy = y0; sy < y1; ++sy) {
        const uint8_t* s = fb.bgrx.data() + (size_t{crop.y + sy} * fb.width + crop.x + x0[x]) * 4;
        for (uint32_t sx = x0[x]; sx < x1[x]; ++sx, s += 4) {
          b += s[0];
          g += s[1];
          r += s[2];
        }
      }
      uint32_t n = (y1 - y0) * (x1[x] - x0[x]);
      out[0] = static_cast<uint8_t>((r + n / 2) / n);
      out[1] = static_cast<uint8_t>((g + n / 2) / n);
      out[2] = static_cast<uint8_t>((b + n / 2) / n);
    }
  }
  return img;
}

std::expected<std::string, Error> EncodePng(const RgbImage& image) {
  if (image.width == 0 || image.height == 0 ||
      image.rgb.size() != size_t{image.width} * image.height * 3)
    return std::unexpected(Error{ErrorCode::kBadInput, "no image"});
  // Filter type 0 (None) before each row, then zlib.
  std::string raw;
  raw.reserve((size_t{image.width} * 3 + 1) * image.height);
  for (uint32_t y = 0; y < image.height; ++y) {
    raw.push_back(0);
    raw.append(reinterpret_cast<const char*>(image.rgb.data()) + size_t{y} * image.width * 3,
               size_t{image.width} * 3);
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &zlen,
                reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 1) != Z_OK)
    return std::unexpected(Error{ErrorCode::kEncode, "zlib failed"});
  z.resize(zlen);
  std::string png = "\x89PNG\r\n\x1a\n";
  auto chunk = [&png](const char* type, const std::string& data) {
    Put32(png, static_cast<uint32_t>(data.size()));
    std::string td = std::string(type, 4) + data;
    png += td;
    Put32(png, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(td.data()),
                                           static_cast<uInt>(td.size()))));
  };
  std::string ihdr;
  Put32(ihdr, image.width);
  Put32(ihdr, image.height);
  ihdr.append({8, 2, 0, 0, 0});  // 8-bit, RGB, deflate, filter 0, no interlace
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", "");
  return png;
}

std::expected<std::string, Error> EncodeJpeg(const RgbImage& image, int quality) {
  if (image.width == 0 || image.height == 0 ||
      image.rgb.size() != size_t{image.width} * image.height * 3)
    return std::unexpected(Error{ErrorCode::kBadInput, "no image"});
  tjhandle tj = tjInitCompress();
  if (!tj)
    return std::unexpected(
        Error{ErrorCode::kEncode, std::string("libjpeg-turbo: ") + tjGetErrorStr()});
  unsigned char* out = nullptr;
  unsigned long size = 0;
  int rc = tjCompress2(tj, image.rgb.data(), static_cast<int>(image.width), 0,
                       static_cast<int>(image.height), TJPF_RGB, &out, &size, TJSAMP_420,
                       std::clamp(quality, 1, 100), TJFLAG_FASTDCT);
  std::string result;
  if (rc == 0) result.assign(reinterpret_cast<const char*>(out), size);
  std::string err = rc == 0 ? "" : tjGetErrorStr2(tj);
  tjFree(out);
  tjDestroy(tj);
  if (rc != 0) return std::unexpected(Error{ErrorCode::kEncode, "libjpeg-turbo: " + err});
  return result;
}

}  // namespace deskbox::vnc_bridge
