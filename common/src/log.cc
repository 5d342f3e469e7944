#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace deskbox::log {
namespace {
Level InitialLevel() {
  const char* env = std::getenv("DESKBOX_LOG");
  if (env == nullptr) return Level::kInfo;
  std::string_view v(env);
  if (v == "debug") return Level::kDebug;
  if (v == "warn") return Level::kWarn;
  if (v == "error") return Level::kError;
  return Level::kInfo;
}
std::atomic<Level> g_level{InitialLevel()};
constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
}  // namespace

void SetLevel(Level level) { g_level = level; }
Level GetLevel() { return g_level; }

void Write(Level level, std::string_view component, std::string_view message) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  tm t;
  gmtime_r(&tv.tv_sec, &t);
  char ts[32];
  std::strftime(ts, sizeof ts, "%H:%M:%S", &t);
  std::string line = fmt::format("{}.{:03d} {} {}: {}\n", ts, static_cast<int>(tv.tv_usec / 1000),
                                 kNames[static_cast<int>(level)], component, message);
  // One write per line so concurrent writers do not interleave within a line.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace deskbox::log
