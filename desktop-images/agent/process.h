// Running programs in the guest: Exec requests, and the helpers the agent itself needs
// (xwininfo, xclip).
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>
#include <vector>

#include "agent/error.h"

namespace deskbox::agent {

inline constexpr const char* kExecIn = "/usr/lib/deskbox/exec-in";

struct ExecSpec {
  std::vector<std::string> argv;  // argv[0] without '/' is looked up in the PATH from `env`
  std::vector<std::string> env;   // "NAME=value", the child's whole environment
  std::string cwd = "/";
  std::string stdin_data;         // written to the child's stdin, which is then closed
  size_t max_output_bytes = 4u << 20;  // per stream; beyond it bytes are read and dropped
  std::chrono::milliseconds timeout{60'000};  // then SIGKILL to the whole process group
  // After the child exits, how long to keep reading for EOF on stdout/stderr: background
  // processes it started may hold the pipes open, and the agent does not wait for them.
  std::chrono::milliseconds drain_after_exit{1000};
  // false: stdout and stderr go to /dev/null (for programs that leave a daemon behind, like
  // `xclip -i`, whose output the agent must not hold).
  bool capture_output = true;
  // Not empty: a cgroup v2 directory the child joins before its program starts, so that all it
  // forks is counted there from the first instruction. The child is then kExecIn, which joins
  // it and execs the program (exit 126 and a message on stderr if it cannot).
  std::string cgroup;
  std::string exec_in = kExecIn;
};

struct ExecOutcome {
  int exit_code = 0;  // -1 when killed by a signal
  int signal = 0;
  std::string stdout_data;
  std::string stderr_data;
  bool truncated = false;
  bool timed_out = false;
  uint64_t duration_ms = 0;
};

class ProcessRunner {
 public:
  virtual ~ProcessRunner() = default;
  // An error only when the program could not be started; a program that fails is an outcome.
  virtual std::expected<ExecOutcome, AgentError> Run(const ExecSpec& spec) = 0;
};

// posix_spawn (vfork-style: nothing runs between fork and exec but the C library's spawn code)
// with POSIX_SPAWN_SETSID, so the child leads a new process group that a timeout kills whole.
class SpawnProcessRunner final : public ProcessRunner {
 public:
  std::expected<ExecOutcome, AgentError> Run(const ExecSpec& spec) override;
};

// The value of NAME in a "NAME=value" list, or nullptr.
const std::string* FindEnv(const std::vector<std::string>& env, std::string_view name);
// Resolves a program name like execvp would, but against `path_env` (the child's PATH):
// names with '/' are returned as they are; otherwise the first executable regular file.
std::expected<std::string, AgentError> ResolveExecutable(std::string_view name,
                                                         std::string_view path_env);

}  // namespace deskbox::agent
