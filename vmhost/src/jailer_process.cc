#include "vmhost/jailer_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "common/files.h"

extern char** environ;

namespace deskbox::vmhost {

std::string SelfDir() {
  std::error_code ec;
  return std::filesystem::read_symlink("/proc/self/exe", ec).parent_path().string();
}

std::expected<JailerProcess, std::string> JailerProcess::Start(const std::string& binary,
                                                               const std::vector<std::string>& args,
                                                               const std::string& socket_path) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  ::unlink(socket_path.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid;
  int rc = ::posix_spawn(&pid, binary.c_str(), nullptr, &attr, cargv.data(), environ);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return std::unexpected("starting " + binary + ": " + ErrnoString(rc));
  for (int i = 0; i < 500; ++i) {
    struct stat st;
    if (::stat(socket_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) return JailerProcess(pid);
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid)
      return std::unexpected(binary + " exited at start (see its log above)");
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return std::unexpected(binary + " did not open its socket within 5 s");
}

JailerProcess::~JailerProcess() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
}

}  // namespace deskbox::vmhost
