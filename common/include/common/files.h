#pragma once
// Small filesystem helpers that report errno instead of throwing.
#include <expected>
#include <string>
#include <string_view>

namespace deskbox {

std::expected<std::string, int> ReadFile(const std::string& path, size_t max_bytes);
// Writes to path.tmp-XXXX, fsyncs, renames over path, fsyncs the directory.
std::expected<void, int> WriteFileAtomic(const std::string& path, std::string_view data,
                                         int mode = 0644);
// rm -rf; missing paths are not an error. Does not follow symlinks.
std::expected<void, int> RemoveTree(const std::string& path);
std::string ErrnoString(int err);

}  // namespace deskbox
