#include "computer_use/query.h"

#include <fmt/format.h>

#include <string>

#include "members.h"
#include "vnc_bridge/rfb_client.h"

namespace deskbox::computer_use {

using internal::Fail;
namespace vb = vnc_bridge;

namespace {

// 1..100, decimal digits only.
std::optional<int> Quality(const std::string& v) {
  if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  int q = std::stoi(v);
  if (q < 1 || q > 100) return std::nullopt;
  return q;
}

// A side of an explicit image size: 1..kMaxScreenSide, decimal digits only.
std::optional<uint32_t> Side(const std::string& v) {
  if (v.empty() || v.size() > 5 || v.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  auto n = std::stoul(v);
  if (n < 1 || n > vb::kMaxScreenSide) return std::nullopt;
  return static_cast<uint32_t>(n);
}

}  // namespace

std::expected<ImageQuery, Error> ParseAdapterQuery(const std::map<std::string, std::string>& query) {
  ImageQuery out;
  for (const auto& [k, v] : query) {
    if (k == "display") {
      auto d = ParseSize(v);
      if (!d) return std::unexpected(d.error());
      out.display = *d;
    } else if (k == "format") {
      if (v != "png" && v != "jpeg")
        return Fail(ErrorCode::kBadImageFormat, "format must be png or jpeg");
      out.image.format = v == "png" ? ImageFormat::kPng : ImageFormat::kJpeg;
    } else if (k == "quality") {
      auto q = Quality(v);
      if (!q) return Fail(ErrorCode::kOutOfRange, "quality must be between 1 and 100");
      out.image.quality = *q;
    } else {
      return Fail(ErrorCode::kUnknownField, fmt::format("unknown query parameter '{}'", k));
    }
  }
  return out;
}

std::expected<ImageQuery, Error> ParseScreenshotQuery(
    const std::map<std::string, std::string>& query) {
  ImageQuery out;
  for (const auto& [k, v] : query) {
    if (k == "format") {
      if (v != "png" && v != "jpeg")
        return Fail(ErrorCode::kBadImageFormat,
                    fmt::format("format must be png or jpeg (got '{}')", v));
      out.image.format = v == "png" ? ImageFormat::kPng : ImageFormat::kJpeg;
    } else if (k == "quality") {
      auto q = Quality(v);
      if (!q) return Fail(ErrorCode::kOutOfRange, "quality must be between 1 and 100");
      out.image.quality = *q;
    } else if (k == "width" || k == "height") {
      auto n = Side(v);
      if (!n)
        return Fail(ErrorCode::kOutOfRange,
                    fmt::format("{} must be between 1 and {}", k, vb::kMaxScreenSide));
      (k == "width" ? out.image.width : out.image.height) = *n;
    } else if (k == "display") {
      auto d = ParseSize(v);
      if (!d) return std::unexpected(d.error());
      out.display = *d;
    } else {
      return Fail(ErrorCode::kUnknownField, fmt::format("unknown query parameter '{}'", k));
    }
  }
  return out;
}

std::expected<std::optional<DisplaySize>, Error> ParseCursorQuery(
    const std::map<std::string, std::string>& query) {
  std::optional<DisplaySize> display;
  for (const auto& [k, v] : query) {
    if (k != "display")
      return Fail(ErrorCode::kUnknownField, fmt::format("unknown query parameter '{}'", k));
    auto d = ParseSize(v);
    if (!d) return std::unexpected(d.error());
    display = *d;
  }
  return display;
}

}  // namespace deskbox::computer_use
