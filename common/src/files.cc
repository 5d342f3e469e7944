#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "common/sha256.h"
#include "common/unique_fd.h"

namespace deskbox {

std::expected<std::string, int> ReadFile(const std::string& path, size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return std::unexpected(errno);
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::unexpected(errno);
    }
    if (n == 0) break;
    if (out.size() + static_cast<size_t>(n) > max_bytes) return std::unexpected(EFBIG);
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

std::expected<void, int> WriteFileAtomic(const std::string& path, std::string_view data,
                                         int mode) {
  uint8_t rnd[6];
  RandomBytes(rnd);
  std::string tmp = path + ".tmp-" + ToHex(rnd);
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode));
  if (!fd) return std::unexpected(errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::unlink(tmp.c_str());
      return std::unexpected(e);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0 || ::fchmod(fd.get(), mode) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return std::unexpected(e);
  }
  fd.reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    return std::unexpected(e);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  UniqueFd dfd(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd) ::fsync(dfd.get());
  return {};
}

std::expected<void, int> RemoveTree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) return std::unexpected(ec.value());
  return {};
}

std::string ErrnoString(int err) { return std::strerror(err); }

}  // namespace deskbox
