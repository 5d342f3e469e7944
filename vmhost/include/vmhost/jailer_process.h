#pragma once
// Starts deskbox-jailer as a child process (for tools and tests that run as root and need a
// private helper) and stops it on destruction.
#include <sys/types.h>

#include <expected>
#include <string>
#include <vector>

namespace deskbox::vmhost {

class JailerProcess {
 public:
  // binary: path of deskbox-jailer; args: its options (--socket is required among them).
  static std::expected<JailerProcess, std::string> Start(const std::string& binary,
                                                         const std::vector<std::string>& args,
                                                         const std::string& socket_path);
  JailerProcess(JailerProcess&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  JailerProcess& operator=(JailerProcess&&) = delete;
  ~JailerProcess();
  pid_t pid() const { return pid_; }

 private:
  explicit JailerProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
};

// Directory of the running executable (to find sibling binaries).
std::string SelfDir();

}  // namespace deskbox::vmhost
