// SpawnProcessRunner against real programs on the build host.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/process.h"
#include "agent_fakes.h"

namespace deskbox::agent {
namespace {

using namespace std::chrono_literals;

ExecSpec Shell(std::string command) {
  ExecSpec spec;
  spec.argv = {"/bin/sh", "-c", std::move(command)};
  spec.env = {"PATH=/usr/bin:/bin", "HOME=/root"};
  spec.cwd = "/";
  spec.timeout = 10s;
  return spec;
}

TEST(AgentProcess, CapturesStdoutStderrAndExitCode) {
  SpawnProcessRunner runner;
  auto out = runner.Run(Shell("echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(out.has_value()) << out.error().message;
  EXPECT_EQ(out->stdout_data, "out\n");
  EXPECT_EQ(out->stderr_data, "err\n");
  EXPECT_EQ(out->exit_code, 3);
  EXPECT_EQ(out->signal, 0);
  EXPECT_FALSE(out->truncated);
  EXPECT_FALSE(out->timed_out);
}

TEST(AgentProcess, StdinIsWrittenThenClosed) {
  SpawnProcessRunner runner;
  ExecSpec spec = Shell("wc -c; cat >/dev/null");
  spec.stdin_data = testing::RandomBytes(3 << 20, 1);  // larger than a pipe buffer
  auto out = runner.Run(spec);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->stdout_data, std::to_string(3 << 20) + "\n");
  EXPECT_EQ(out->exit_code, 0);
}

TEST(AgentProcess, ChildThatIgnoresStdinDoesNotHang) {
  SpawnProcessRunner runner;
  ExecSpec spec = Shell("exit 0");
  spec.stdin_data = std::string(4 << 20, 'x');  // EPIPE once the child is gone
  auto out = runner.Run(spec);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->exit_code, 0);
}

TEST(AgentProcess, OutputCapKeepsDrainingAndMarksTruncated) {
  SpawnProcessRunner runner;
  ExecSpec spec = Shell("head -c 3000000 /dev/zero; head -c 10 /dev/zero >&2; echo done >&2");
  spec.max_output_bytes = 1000;
  auto out = runner.Run(spec);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->stdout_data.size(), 1000u);
  EXPECT_TRUE(out->truncated);
  // The child was not blocked by the cap: it ran to the end.
  EXPECT_EQ(out->exit_code, 0);
  EXPECT_EQ(out->stderr_data.size(), 15u);
}

TEST(AgentProcess, ConcurrentStreamsDoNotDeadlock) {
  SpawnProcessRunner runner;
  // Writes a lot to both streams, interleaved, more than either pipe buffer holds.
  auto out = runner.Run(Shell("for i in 1 2 3 4 5 6 7 8; do head -c 100000 /dev/zero; "
                              "head -c 100000 /dev/zero >&2; done"));
  ASSERT_TRUE(out);
  EXPECT_EQ(out->stdout_data.size(), 800000u);
  EXPECT_EQ(out->stderr_data.size(), 800000u);
}

TEST(AgentProcess, TimeoutKillsTheWholeProcessGroup) {
  SpawnProcessRunner runner;
  testing::TempDir dir;
  const std::string marker = dir.File("grandchild-alive");
  // The grandchild would create the marker after 2 s if it survived the kill.
  ExecSpec spec = Shell("(sleep 2; touch " + marker + ") & echo started; sleep 30");
  spec.timeout = 500ms;
  const auto start = std::chrono::steady_clock::now();
  auto out = runner.Run(spec);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_TRUE(out);
  EXPECT_TRUE(out->timed_out);
  EXPECT_EQ(out->exit_code, -1);
  EXPECT_EQ(out->signal, SIGKILL);
  EXPECT_EQ(out->stdout_data, "started\n");
  EXPECT_LT(elapsed, 5s);
  EXPECT_GE(out->duration_ms, 400u);
  ::sleep(3);
  EXPECT_NE(::access(marker.c_str(), F_OK), 0) << "a grandchild survived the timeout";
}

TEST(AgentProcess, ReportsTheKillingSignal) {
  SpawnProcessRunner runner;
  auto out = runner.Run(Shell("kill -TERM $$"));
  ASSERT_TRUE(out);
  EXPECT_EQ(out->exit_code, -1);
  EXPECT_EQ(out->signal, SIGTERM);
  EXPECT_FALSE(out->timed_out);
}

TEST(AgentProcess, BackgroundChildHoldingThePipeDoesNotBlock) {
  SpawnProcessRunner runner;
  ExecSpec spec = Shell("sleep 20 & echo hi");
  spec.drain_after_exit = 300ms;
  const auto start = std::chrono::steady_clock::now();
  auto out = runner.Run(spec);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->stdout_data, "hi\n");
  EXPECT_EQ(out->exit_code, 0);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

TEST(AgentProcess, EnvironmentAndCwdAreTheSpecs) {
  SpawnProcessRunner runner;
  testing::TempDir dir;
  ExecSpec spec = Shell("pwd; echo \"$FOO\"; env | wc -l");
  spec.env = {"PATH=/usr/bin:/bin", "FOO=bar baz"};
  spec.cwd = dir.path();
  auto out = runner.Run(spec);
  ASSERT_TRUE(out);
  // sh adds PWD (and maybe SHLVL, _), nothing from the test's own environment.
  EXPECT_TRUE(out->stdout_data.starts_with(dir.path() + "\nbar baz\n")) << out->stdout_data;
}

TEST(AgentProcess, SignalsAreResetInTheChild) {
  // The agent ignores SIGPIPE and blocks SIGTERM; children must not inherit that.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  auto old_pipe = ::signal(SIGPIPE, SIG_IGN);
  SpawnProcessRunner runner;
  auto out = runner.Run(Shell("grep -E '^(SigBlk|SigIgn)' /proc/self/status"));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::signal(SIGPIPE, old_pipe);
  ASSERT_TRUE(out);
  EXPECT_NE(out->stdout_data.find("SigBlk:\t0000000000000000"), std::string::npos)
      << out->stdout_data;
}

TEST(AgentProcess, NewSessionPerChild) {
  SpawnProcessRunner runner;
  // /proc/<pid>/stat: pid (comm) state ppid pgrp session ...
  auto out = runner.Run(Shell("read -r pid comm state ppid pgrp sid rest < /proc/$$/stat; "
                              "echo \"$pid $pgrp $sid\""));
  ASSERT_TRUE(out);
  std::istringstream in(out->stdout_data);
  long pid = 0, pgrp = 0, sid = 0;
  in >> pid >> pgrp >> sid;
  EXPECT_GT(pid, 0);
  EXPECT_EQ(pgrp, pid) << out->stdout_data;
  EXPECT_EQ(sid, pid) << out->stdout_data;
}

// A command with a cgroup starts through exec-in: it joins the cgroup (its pid in
// cgroup.procs) before the program runs, keeps its argv[0], and does not inherit the agent's
// oom_score_adj. A plain directory stands in for the cgroup here.
TEST(AgentProcess, ACommandWithACgroupJoinsItBeforeItStarts) {
  namespace fs = std::filesystem;
  fs::path cg = fs::temp_directory_path() / ("deskbox-exec-in-" + std::to_string(::getpid()));
  fs::create_directories(cg);
  { std::ofstream(cg / "cgroup.procs"); }
  SpawnProcessRunner runner;
  ExecSpec spec = Shell("echo $$ $0; cat /proc/self/oom_score_adj");
  spec.argv[0] = "sh";  // looked up in PATH, given to the program as it was asked
  spec.cgroup = cg.string();
  spec.exec_in = DESKBOX_EXEC_IN;
  auto out = runner.Run(spec);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->exit_code, 0) << out->stderr_data;
  std::istringstream words(out->stdout_data);
  std::string pid, argv0, adj;
  words >> pid >> argv0 >> adj;
  std::ifstream procs(cg / "cgroup.procs");
  std::string joined;
  procs >> joined;
  EXPECT_EQ(joined, pid) << "the program's own pid joined, before it ran";
  EXPECT_EQ(argv0, "sh");
  EXPECT_EQ(adj, "0");

  // A cgroup that cannot be joined: the command never runs.
  spec.cgroup = (cg / "missing").string();
  spec.argv = {"/bin/sh", "-c", "echo ran"};
  out = runner.Run(spec);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->exit_code, 126);
  EXPECT_EQ(out->stdout_data, "");
  EXPECT_NE(out->stderr_data.find("cannot enter the command cgroup"), std::string::npos) << out->stderr_data;

  // A program that cannot be started is an error, as without a cgroup, not exec-in's status.
  spec.cgroup = cg.string();
  spec.argv = {"/nonexistent/program"};
  out = runner.Run(spec);
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("exec /nonexistent/program"), std::string::npos) << out.error().message;
  fs::remove_all(cg);
}

TEST(AgentProcess, MissingProgram) {
  SpawnProcessRunner runner;
  ExecSpec spec;
  spec.argv = {"definitely-not-a-program-deskbox"};
  spec.env = {"PATH=/usr/bin:/bin"};
  auto out = runner.Run(spec);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, pb::Error::NOT_FOUND);
  spec.argv = {"/nonexistent/prog"};
  out = runner.Run(spec);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, pb::Error::NOT_FOUND);
}

TEST(AgentProcess, ResolvesAgainstTheChildsPath) {
  testing::TempDir dir;
  auto found = ResolveExecutable("sh", "relative/dir:" + dir.path() + ":/bin");
  ASSERT_TRUE(found);
  EXPECT_EQ(*found, "/bin/sh");
  EXPECT_FALSE(ResolveExecutable("sh", "").has_value());
  EXPECT_EQ(*ResolveExecutable("./x", ""), "./x");
  EXPECT_FALSE(ResolveExecutable("", "/bin").has_value());
}

TEST(AgentProcess, NoOutputCaptureForDaemonizingHelpers) {
  SpawnProcessRunner runner;
  // Like xclip -i: the parent exits, a child lingers holding whatever stdout it was given.
  ExecSpec spec = Shell("(sleep 20 &) ; echo gone");
  spec.capture_output = false;
  spec.drain_after_exit = 0ms;
  const auto start = std::chrono::steady_clock::now();
  auto out = runner.Run(spec);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->exit_code, 0);
  EXPECT_TRUE(out->stdout_data.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

}  // namespace
}  // namespace deskbox::agent
