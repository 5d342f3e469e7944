#include "common/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "common/unique_fd.h"

extern char** environ;

namespace deskbox {

std::string JoinArgv(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

std::expected<CommandResult, int> RunCommand(const std::vector<std::string>& argv,
                                             const std::string& stdin_data,
                                             std::chrono::milliseconds timeout) {
  constexpr size_t kMaxOutput = 1 << 20;
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return std::unexpected(errno);
  UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]);
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return std::unexpected(errno);
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_r.get(), 0);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 1);
  posix_spawn_file_actions_adddup2(&fa, out_w.get(), 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return std::unexpected(rc);
  in_r.reset();
  out_w.reset();

  CommandResult result;
  ::fcntl(in_w.get(), F_SETFL, O_NONBLOCK);
  size_t written = 0;
  if (stdin_data.empty()) in_w.reset();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[65536];
  while (out_r) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {in_w.get(), POLLOUT, 0}};
    int n = ::poll(fds, in_w ? 2 : 1, static_cast<int>(left.count()));
    if (n < 0 && errno != EINTR) break;
    if (in_w && (fds[1].revents & (POLLOUT | POLLERR | POLLHUP))) {
      ssize_t w = ::write(in_w.get(), stdin_data.data() + written, stdin_data.size() - written);
      if (w > 0) written += static_cast<size_t>(w);
      if (w < 0 && errno != EAGAIN && errno != EINTR) in_w.reset();
      if (written == stdin_data.size()) in_w.reset();
    }
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      ssize_t r = ::read(out_r.get(), buf, sizeof buf);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        out_r.reset();
      } else if (result.output.size() < kMaxOutput) {
        result.output.append(buf, std::min(static_cast<size_t>(r), kMaxOutput - result.output.size()));
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace deskbox
