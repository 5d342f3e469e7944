#pragma once
// The query strings of the desktop calls, decoded by the HTTP layer into name → value (a name
// given twice keeps the first). Unknown parameters are refused; the first problem in name order
// is reported.
#include <expected>
#include <map>
#include <optional>
#include <string>

#include "computer_use/display.h"
#include "computer_use/error.h"
#include "computer_use/image_request.h"

namespace deskbox::computer_use {

struct ImageQuery {
  std::optional<DisplaySize> display;
  ImageRequest image;
};

// The model tool adapters (/computer/anthropic, /computer/openai): display=WxH, format=png|jpeg,
// quality=1..100.
std::expected<ImageQuery, Error> ParseAdapterQuery(const std::map<std::string, std::string>& query);

// GET screenshot: format, quality, display, and an explicit width and/or height (1..4096).
std::expected<ImageQuery, Error> ParseScreenshotQuery(
    const std::map<std::string, std::string>& query);

// GET cursor: display only.
std::expected<std::optional<DisplaySize>, Error> ParseCursorQuery(
    const std::map<std::string, std::string>& query);

}  // namespace deskbox::computer_use
