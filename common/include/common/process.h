#pragma once
// Running short helper programs (ip, nft, qemu-img) synchronously with captured output.
#include <chrono>
#include <expected>
#include <string>
#include <vector>

namespace deskbox {

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr interleaved, capped at 1 MiB
  bool timed_out = false;
  bool ok() const { return exit_code == 0 && !timed_out; }
};

// Runs argv[0] (looked up in PATH) with the given stdin, waits at most `timeout`, then kills
// it. Returns errno if it could not be started.
std::expected<CommandResult, int> RunCommand(const std::vector<std::string>& argv,
                                             const std::string& stdin_data = {},
                                             std::chrono::milliseconds timeout =
                                                 std::chrono::seconds(30));

// "prog arg1 arg2" for error messages.
std::string JoinArgv(const std::vector<std::string>& argv);

}  // namespace deskbox
