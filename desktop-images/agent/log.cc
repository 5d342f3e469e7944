#include "agent/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <string>

namespace deskbox::agent {
namespace {
std::atomic<bool> g_log_enabled{true};
}

void SetLogEnabled(bool enabled) { g_log_enabled = enabled; }

void LogLine(std::string_view line) {
  if (!g_log_enabled) return;
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  char prefix[64];
  const int n = std::snprintf(prefix, sizeof prefix, "deskbox-agent[%lld.%03ld] ",
                              static_cast<long long>(now.tv_sec), now.tv_nsec / 1000000);
  std::string out(prefix, n > 0 ? static_cast<size_t>(n) : 0);
  // One line per event, even if a caller passes text with newlines in it.
  for (char c : line) out.push_back(c == '\n' || c == '\r' ? ' ' : c);
  out.push_back('\n');
  // A single write(2) so lines from different threads do not interleave.
  const char* p = out.data();
  size_t left = out.size();
  while (left > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    left -= static_cast<size_t>(w);
  }
}

}  // namespace deskbox::agent
