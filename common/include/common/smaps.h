#pragma once
// /proc/PID/smaps, read into one record per mapping.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deskbox {

// One mapping: its header line ("start-end perms offset dev inode [path]") and the sizes listed
// under it.
struct SmapsMapping {
  uint64_t start = 0, end = 0;
  std::string perms;  // "rwxp", "r--s", ...
  uint64_t inode = 0;
  std::string path;  // empty for anonymous memory; else a file, "[heap]", "... (deleted)"
  uint64_t rss_kib = 0, pss_kib = 0, anonymous_kib = 0;
  bool anonymous() const { return inode == 0 && path.empty(); }
};

// The mappings of an smaps text, in order. Lines that are neither a header nor a "Name: N kB"
// line after one are skipped.
std::vector<SmapsMapping> ParseSmaps(std::string_view text);

}  // namespace deskbox
