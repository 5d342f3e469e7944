#include "agent/process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "agent/unique_fd.h"

namespace deskbox::agent {
namespace {

using SteadyClock = std::chrono::steady_clock;

int PidfdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

bool SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL);
  return flags >= 0 && ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0;
}

// RAII for the posix_spawn attribute objects.
struct SpawnAttributes {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  bool attr_ok = false, actions_ok = false;
  SpawnAttributes() {
    attr_ok = posix_spawnattr_init(&attr) == 0;
    actions_ok = posix_spawn_file_actions_init(&actions) == 0;
  }
  ~SpawnAttributes() {
    if (attr_ok) posix_spawnattr_destroy(&attr);
    if (actions_ok) posix_spawn_file_actions_destroy(&actions);
  }
};

// One captured output stream.
struct OutputStream {
  UniqueFd fd;
  std::string* sink;
  size_t cap;
  bool* truncated;

  // Reads what is there; false once the stream is finished (EOF or error).
  bool Drain() {
    char buf[64 * 1024];
    for (;;) {
      const ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n > 0) {
        const size_t room = cap - std::min(cap, sink->size());
        const size_t keep = std::min(room, static_cast<size_t>(n));
        sink->append(buf, keep);
        if (keep < static_cast<size_t>(n)) *truncated = true;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      fd.reset();  // EOF or a read error: either way, nothing more will come
      return false;
    }
  }
};

// Writing to the stdin pipe of a child that has exited raises SIGPIPE. The agent ignores it
// process-wide, but the runner does not rely on that: it blocks SIGPIPE in this thread while it
// runs and discards one that is pending on the way out (EPIPE is handled where it occurs).
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    const timespec zero{};
    while (sigtimedwait(&pipe_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
};

}  // namespace

const std::string* FindEnv(const std::vector<std::string>& env, std::string_view name) {
  for (const auto& entry : env) {
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 &&
        entry[name.size()] == '=') {
      return &entry;
    }
  }
  return nullptr;
}

namespace {
// 0 when `path` is a regular file this process may execute; else why not (an errno, EACCES
// for what is not a regular file).
int NotExecutable(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0) return errno;
  if (!S_ISREG(st.st_mode)) return EACCES;
  return ::access(path.c_str(), X_OK) == 0 ? 0 : errno;
}
}  // namespace

std::expected<std::string, AgentError> ResolveExecutable(std::string_view name,
                                                         std::string_view path_env) {
  if (name.empty()) return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "empty argv[0]"));
  if (name.find('/') != std::string_view::npos) return std::string(name);
  while (!path_env.empty()) {
    const size_t colon = path_env.find(':');
    const std::string_view dir = path_env.substr(0, colon);
    path_env = colon == std::string_view::npos ? std::string_view() : path_env.substr(colon + 1);
    if (dir.empty() || dir.front() != '/') continue;  // never the current directory
    std::string candidate(dir);
    candidate += '/';
    candidate += name;
    if (NotExecutable(candidate) == 0) return candidate;
  }
  return std::unexpected(
      MakeError(pb::Error::NOT_FOUND, "program not found in PATH: " + std::string(name)));
}

std::expected<ExecOutcome, AgentError> SpawnProcessRunner::Run(const ExecSpec& spec) {
  if (spec.argv.empty()) {
    return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, "empty argv"));
  }
  const std::string* path_entry = FindEnv(spec.env, "PATH");
  const std::string_view path_env =
      path_entry ? std::string_view(*path_entry).substr(5) : std::string_view("/usr/bin:/bin");
  auto program = ResolveExecutable(spec.argv[0], path_env);
  if (!program) return std::unexpected(program.error());

  // Everything the child needs is built before the spawn: no allocation happens in the child.
  // With a cgroup: exec-in CGROUP ARGV0 PROGRAM ARGS... (posix_spawn cannot place a child in a
  // cgroup, and moving it after it started would miss what it forked meanwhile).
  std::vector<std::string> joined;
  if (!spec.cgroup.empty()) {
    // What posix_spawn of the program itself would refuse is refused here, with its reason,
    // rather than as exec-in's exit status 126 or 127.
    if (int e = NotExecutable(*program)) return std::unexpected(ErrnoError(e, "exec " + *program));
    joined = {spec.exec_in, spec.cgroup, spec.argv[0], *program};
    joined.insert(joined.end(), spec.argv.begin() + 1, spec.argv.end());
    *program = spec.exec_in;
  }
  const std::vector<std::string>& args = spec.cgroup.empty() ? spec.argv : joined;
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  envp.reserve(spec.env.size() + 1);
  for (const auto& e : spec.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in_pipe[2], out_pipe[2], err_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0) return std::unexpected(ErrnoError(errno, "pipe"));
  UniqueFd in_r(in_pipe[0]), in_w(in_pipe[1]);
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return std::unexpected(ErrnoError(errno, "pipe"));
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return std::unexpected(ErrnoError(errno, "pipe"));
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);

  SpawnAttributes sa;
  if (!sa.attr_ok || !sa.actions_ok) {
    return std::unexpected(MakeError(pb::Error::INTERNAL, "posix_spawn attributes"));
  }
  int rc = 0;
  // The pipes are O_CLOEXEC; dup2 onto 0/1/2 clears that flag for the copies. The agent keeps
  // 0/1/2 open (main.cc), so a pipe end is never itself 0, 1 or 2.
  rc |= posix_spawn_file_actions_adddup2(&sa.actions, in_r.get(), STDIN_FILENO);
  if (spec.capture_output) {
    rc |= posix_spawn_file_actions_adddup2(&sa.actions, out_w.get(), STDOUT_FILENO);
    rc |= posix_spawn_file_actions_adddup2(&sa.actions, err_w.get(), STDERR_FILENO);
  } else {
    rc |= posix_spawn_file_actions_addopen(&sa.actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    rc |= posix_spawn_file_actions_addopen(&sa.actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  rc |= posix_spawn_file_actions_addchdir_np(&sa.actions, spec.cwd.c_str());
  // The agent blocks SIGIO/SIGTERM/SIGINT and ignores SIGPIPE/SIGHUP; the child gets defaults.
  sigset_t empty_mask, default_signals;
  sigemptyset(&empty_mask);
  sigemptyset(&default_signals);
  for (int sig : {SIGPIPE, SIGHUP, SIGIO, SIGTERM, SIGINT, SIGQUIT, SIGCHLD, SIGUSR1, SIGUSR2}) {
    sigaddset(&default_signals, sig);
  }
  rc |= posix_spawnattr_setsigmask(&sa.attr, &empty_mask);
  rc |= posix_spawnattr_setsigdefault(&sa.attr, &default_signals);
  rc |= posix_spawnattr_setflags(
      &sa.attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  if (rc != 0) return std::unexpected(MakeError(pb::Error::INTERNAL, "posix_spawn attributes"));

  ScopedSigpipeBlock no_sigpipe;
  const auto start = SteadyClock::now();
  pid_t pid = -1;
  rc = ::posix_spawn(&pid, program->c_str(), &sa.actions, &sa.attr, argv.data(), envp.data());
  if (rc != 0) return std::unexpected(ErrnoError(rc, "exec " + *program));
  in_r.reset();
  out_w.reset();
  err_w.reset();

  ExecOutcome outcome;
  // The stdin pipe is only worth keeping if there is something to write.
  if (spec.stdin_data.empty()) in_w.reset();
  size_t stdin_written = 0;
  OutputStream out{std::move(out_r), &outcome.stdout_data, spec.max_output_bytes,
                   &outcome.truncated};
  OutputStream err{std::move(err_r), &outcome.stderr_data, spec.max_output_bytes,
                   &outcome.truncated};
  if (!spec.capture_output) {
    out.fd.reset();
    err.fd.reset();
  }
  for (UniqueFd* fd : {&in_w, &out.fd, &err.fd}) {
    if (fd->valid()) SetNonBlocking(fd->get());
  }
  UniqueFd pidfd(PidfdOpen(pid));  // readable once the child exits; else we poll waitpid

  const auto deadline = start + spec.timeout;
  std::optional<SteadyClock::time_point> drain_deadline;
  bool exited = false;
  int status = 0;

  auto reap = [&](int flags) {
    for (;;) {
      const pid_t r = ::waitpid(pid, &status, flags);
      if (r == pid) {
        exited = true;
        outcome.duration_ms = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - start)
                .count());
        drain_deadline = SteadyClock::now() + spec.drain_after_exit;
        in_w.reset();  // nobody left to read it
        pidfd.reset();
        return;
      }
      if (r < 0 && errno == EINTR) continue;
      return;  // 0: still running
    }
  };

  while (!exited || out.fd.valid() || err.fd.valid()) {
    const auto now = SteadyClock::now();
    if (!exited && now >= deadline && !outcome.timed_out) {
      // pid leads its own process group (setsid): kill everything it started.
      ::kill(-pid, SIGKILL);
      outcome.timed_out = true;
    }
    if (exited && now >= *drain_deadline) {
      // What the child wrote before it exited is in the pipes already; take it, but do not
      // wait for processes it left behind.
      if (out.fd.valid()) out.Drain();
      if (err.fd.valid()) err.Drain();
      break;
    }

    pollfd fds[4];
    nfds_t n = 0;
    int in_idx = -1, out_idx = -1, err_idx = -1;
    if (in_w.valid()) {
      in_idx = static_cast<int>(n);
      fds[n++] = {in_w.get(), POLLOUT, 0};
    }
    if (out.fd.valid()) {
      out_idx = static_cast<int>(n);
      fds[n++] = {out.fd.get(), POLLIN, 0};
    }
    if (err.fd.valid()) {
      err_idx = static_cast<int>(n);
      fds[n++] = {err.fd.get(), POLLIN, 0};
    }
    if (!exited && pidfd.valid()) fds[n++] = {pidfd.get(), POLLIN, 0};  // exit wakes us
    auto until = exited ? *drain_deadline : (outcome.timed_out ? now + std::chrono::seconds(5)
                                                               : deadline);
    auto wait_ms = std::chrono::ceil<std::chrono::milliseconds>(until - now).count();
    if (!exited && !pidfd.valid()) wait_ms = std::min<long long>(wait_ms, 20);  // no pidfd
    wait_ms = std::clamp<long long>(wait_ms, 0, 60'000);
    const int ready = ::poll(fds, n, static_cast<int>(wait_ms));
    if (ready < 0 && errno != EINTR) break;

    if (in_idx >= 0 && (fds[in_idx].revents & (POLLOUT | POLLERR | POLLHUP))) {
      while (stdin_written < spec.stdin_data.size()) {
        const size_t chunk = std::min<size_t>(spec.stdin_data.size() - stdin_written, 64 * 1024);
        const ssize_t w = ::write(in_w.get(), spec.stdin_data.data() + stdin_written, chunk);
        if (w > 0) {
          stdin_written += static_cast<size_t>(w);
        } else if (w < 0 && errno == EINTR) {
          continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          break;
        } else {
          stdin_written = spec.stdin_data.size();  // EPIPE: the child does not want it
        }
      }
      if (stdin_written >= spec.stdin_data.size()) in_w.reset();
    }
    if (out_idx >= 0 && fds[out_idx].revents) out.Drain();
    if (err_idx >= 0 && fds[err_idx].revents) err.Drain();
    if (!exited) reap(WNOHANG);
  }
  if (!exited) {
    // Output still open after the drain window of a killed child, or poll failed: make sure
    // the child is gone and reaped.
    ::kill(-pid, SIGKILL);
    reap(0);
  }
  if (WIFEXITED(status)) {
    outcome.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    outcome.exit_code = -1;
    outcome.signal = WTERMSIG(status);
  }
  return outcome;
}

}  // namespace deskbox::agent
