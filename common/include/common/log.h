#pragma once
// Logging to stderr, one line per event, in one of two formats:
//  - text: "HH:MM:SS.mmm LEVEL component: message" (UTC), for people at a terminal;
//  - json: one JSON object per line, for log collectors: {"time": RFC 3339 UTC with ms,
//    "level", "component", "message", and "sandbox_id" / "request_id" when the message names
//    a sandbox (sb-<16 hex>) or a request (req_<16 hex>)}.
// The format is DESKBOX_LOG_FORMAT (text, json) until SetFormat; the level DESKBOX_LOG.
// Never log secrets (tokens, keys): callers pass ids, not credentials.
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace deskbox::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };
enum class Format { kText, kJson };

void SetLevel(Level level);
Level GetLevel();
void SetFormat(Format format);
Format GetFormat();
void Write(Level level, std::string_view component, std::string_view message);
// The line Write prints (newline included) for a message at `unix_us` microseconds.
std::string FormatLine(Format format, int64_t unix_us, Level level, std::string_view component,
                       std::string_view message);

template <typename... Args>
void Info(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (GetLevel() <= Level::kInfo)
    Write(Level::kInfo, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Warn(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (GetLevel() <= Level::kWarn)
    Write(Level::kWarn, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Error(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  Write(Level::kError, component, fmt::format(f, std::forward<Args>(args)...));
}
template <typename... Args>
void Debug(std::string_view component, fmt::format_string<Args...> f, Args&&... args) {
  if (GetLevel() <= Level::kDebug)
    Write(Level::kDebug, component, fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace deskbox::log
