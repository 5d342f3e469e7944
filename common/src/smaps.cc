#include "common/smaps.h"

#include <cctype>
#include <cstdlib>

namespace deskbox {
namespace {

// The next space-separated word of `line` from `at`; `at` moves past it and the spaces after.
std::string_view Word(std::string_view line, size_t& at) {
  size_t end = std::min(line.find(' ', at), line.size());
  std::string_view w = line.substr(at, end - at);
  at = std::min(line.find_first_not_of(' ', end), line.size());
  return w;
}

uint64_t Number(std::string_view s, int base) {
  return std::strtoull(std::string(s).c_str(), nullptr, base);
}

}  // namespace

std::vector<SmapsMapping> ParseSmaps(std::string_view text) {
  std::vector<SmapsMapping> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    size_t dash = line.find('-'), space = line.find(' ');
    if (std::isxdigit(static_cast<unsigned char>(line[0])) && dash < space && space != std::string_view::npos) {
      SmapsMapping m;
      size_t at = 0;
      std::string_view range = Word(line, at);
      m.start = Number(range.substr(0, dash), 16);
      m.end = Number(range.substr(dash + 1), 16);
      m.perms = Word(line, at);
      Word(line, at);  // offset
      Word(line, at);  // device
      m.inode = Number(Word(line, at), 10);
      m.path = line.substr(at);
      out.push_back(std::move(m));
      continue;
    }
    if (out.empty()) continue;
    auto field = [&](std::string_view name, uint64_t& into) {
      if (line.starts_with(name)) into = Number(line.substr(name.size()), 10);
    };
    field("Rss:", out.back().rss_kib);
    field("Pss:", out.back().pss_kib);
    field("Anonymous:", out.back().anonymous_kib);
  }
  return out;
}

}  // namespace deskbox
