#pragma once
// Minimal logging to stderr: one line per event, "time level component: message".
// Never log secrets (tokens, keys): callers pass ids, not credentials.
#include <fmt/format.h>

#include <string_view>

namespace deskbox::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLevel(Level level);
Level GetLevel();
void Write(Level level, std::string_view component, std::string_view message);

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
