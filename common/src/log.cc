#include "common/log.h"

#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
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
Format InitialFormat() {
  const char* env = std::getenv("DESKBOX_LOG_FORMAT");
  return env != nullptr && std::string_view(env) == "json" ? Format::kJson : Format::kText;
}
std::atomic<Level> g_level{InitialLevel()};
std::atomic<Format> g_format{InitialFormat()};
constexpr const char* kNames[] = {"DEBUG", "INFO", "WARN", "ERROR"};
constexpr const char* kJsonNames[] = {"debug", "info", "warn", "error"};

// A JSON string of `s`: escapes what JSON requires and replaces bytes that are not UTF-8 with
// U+FFFD, so that every line parses whatever a message holds. Written here rather than with
// nlohmann's dump (error_handler_t::replace, as the API does): the jailer logs through this
// file and links no JSON library (vmhost_jailer_links_test).
void AppendJsonString(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      // The length of a well-formed UTF-8 sequence starting here, else 0.
      size_t n = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
      if (n == 2 && c < 0xc2) n = 0;  // overlong
      for (size_t k = 1; n && k < n; ++k)
        if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) n = 0;
      if (n == 3) {
        unsigned c1 = static_cast<unsigned char>(s[i + 1]);
        if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 >= 0xa0)) n = 0;  // overlong, surrogate
      } else if (n == 4) {
        unsigned c1 = static_cast<unsigned char>(s[i + 1]);
        if ((c == 0xf0 && c1 < 0x90) || c > 0xf4 || (c == 0xf4 && c1 >= 0x90)) n = 0;
      }
      if (n) {
        out.append(s.substr(i, n));
        i += n;
      } else {
        out += "\xef\xbf\xbd";
        ++i;
      }
    }
  }
  out += '"';
}

// The first id of the form <prefix><16 lowercase hex> in `message`, or "".
std::string_view FindId(std::string_view message, std::string_view prefix) {
  for (size_t at = message.find(prefix); at != std::string_view::npos; at = message.find(prefix, at + 1)) {
    size_t end = at + prefix.size() + 16;
    if (end > message.size()) break;
    bool hex = true;
    for (size_t i = at + prefix.size(); i < end && hex; ++i)
      hex = (message[i] >= '0' && message[i] <= '9') || (message[i] >= 'a' && message[i] <= 'f');
    bool bounded = (at == 0 || !std::isalnum(static_cast<unsigned char>(message[at - 1]))) &&
                   (end == message.size() || !std::isalnum(static_cast<unsigned char>(message[end])));
    if (hex && bounded) return message.substr(at, end - at);
  }
  return {};
}
}  // namespace

void SetLevel(Level level) { g_level = level; }
Level GetLevel() { return g_level; }
void SetFormat(Format format) { g_format = format; }
Format GetFormat() { return g_format; }

std::string FormatLine(Format format, int64_t unix_us, Level level, std::string_view component,
                       std::string_view message) {
  time_t secs = static_cast<time_t>(unix_us / 1000000);
  int ms = static_cast<int>((unix_us / 1000) % 1000);
  tm t;
  gmtime_r(&secs, &t);
  char ts[32];
  if (format == Format::kText) {
    std::strftime(ts, sizeof ts, "%H:%M:%S", &t);
    return fmt::format("{}.{:03d} {} {}: {}\n", ts, ms, kNames[static_cast<int>(level)], component, message);
  }
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &t);
  std::string line = fmt::format(R"({{"time":"{}.{:03d}Z","level":"{}","component":)", ts, ms,
                                 kJsonNames[static_cast<int>(level)]);
  AppendJsonString(line, component);
  line += R"(,"message":)";
  AppendJsonString(line, message);
  if (auto sb = FindId(message, "sb-"); !sb.empty()) line += fmt::format(R"(,"sandbox_id":"{}")", sb);
  if (auto req = FindId(message, "req_"); !req.empty()) line += fmt::format(R"(,"request_id":"{}")", req);
  line += "}\n";
  return line;
}

void Write(Level level, std::string_view component, std::string_view message) {
  timeval tv;
  gettimeofday(&tv, nullptr);
  std::string line = FormatLine(g_format, int64_t{tv.tv_sec} * 1000000 + tv.tv_usec, level, component, message);
  // One write per line so concurrent writers do not interleave within a line.
  (void)!::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace deskbox::log
