// AgentService request handling with fakes (and the real process runner for Exec).
#include "agent/service.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "agent/log.h"
#include "agent_fakes.h"
#include "desktop_images/agent_frame.h"

namespace deskbox::agent {
namespace {

using namespace std::chrono_literals;

struct ServiceFixture : ::testing::Test {
  testing::FakeClock clock;
  testing::FakeSystemControl system;
  SpawnProcessRunner real_processes;
  testing::FakeProcessRunner fake_processes;
  testing::FakeDesktopProbe desktop;
  InlineTaskRunner inline_tasks;
  testing::ReplyRecorder rec;

  std::unique_ptr<AgentService> MakeService(ProcessRunner& processes, TaskRunner& tasks,
                                            AgentLimits limits = {}) {
    return std::make_unique<AgentService>(
        AgentDeps{clock, system, processes, desktop, tasks}, limits);
  }
  std::unique_ptr<AgentService> Service() { return MakeService(real_processes, inline_tasks); }

  // Handles one request and returns its single response.
  pb::Response Call(AgentService& service, const pb::Request& request) {
    const size_t before = rec.responses().size();
    service.Handle(request, rec.reply());
    EXPECT_TRUE(rec.WaitFor(before + 1));
    auto all = rec.responses();
    EXPECT_EQ(all.size(), before + 1);
    return all.back();
  }

  static pb::Request ExecRequest(uint64_t id, std::vector<std::string> argv) {
    pb::Request r;
    r.set_id(id);
    for (auto& a : argv) r.mutable_exec()->add_argv(a);
    r.mutable_exec()->set_cwd("/");
    return r;
  }
  static pb::Request ShellRequest(uint64_t id, std::string shell) {
    pb::Request r;
    r.set_id(id);
    r.mutable_exec()->set_shell(std::move(shell));
    r.mutable_exec()->set_cwd("/");
    return r;
  }
};

TEST_F(ServiceFixture, PingAnswersPong) {
  auto service = Service();
  pb::Request ping;
  ping.set_id(42);
  ping.mutable_ping();
  auto response = Call(*service, ping);
  EXPECT_EQ(response.id(), 42u);
  ASSERT_TRUE(response.has_pong());
  EXPECT_EQ(response.pong().protocol_version(), 1u);
  EXPECT_EQ(response.pong().guest_monotonic_ns(), static_cast<uint64_t>(clock.MonotonicNs()));
  EXPECT_EQ(response.pong().guest_realtime_ns(), clock.RealtimeNs());
}

TEST_F(ServiceFixture, SetClock) {
  auto service = Service();
  pb::Request r;
  r.set_id(1);
  r.mutable_set_clock()->set_unix_time_ns(1'800'000'000'000'000'000);
  EXPECT_TRUE(Call(*service, r).has_ack());
  EXPECT_EQ(system.clock_sets, std::vector<int64_t>{1'800'000'000'000'000'000});
  r.mutable_set_clock()->set_unix_time_ns(-5);
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::INVALID_ARGUMENT);
  system.fail_with = MakeError(pb::Error::PERMISSION_DENIED, "clock_settime: EPERM");
  r.mutable_set_clock()->set_unix_time_ns(5);
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::PERMISSION_DENIED);
}

TEST_F(ServiceFixture, ReseedSizeLimits) {
  auto service = Service();
  pb::Request r;
  r.set_id(1);
  for (size_t n : {size_t{0}, size_t{31}, size_t{513}, size_t{100000}}) {
    r.mutable_reseed()->set_entropy(std::string(n, 'e'));
    EXPECT_EQ(Call(*service, r).error().code(), pb::Error::INVALID_ARGUMENT) << n;
  }
  for (size_t n : {size_t{32}, size_t{512}}) {
    r.mutable_reseed()->set_entropy(std::string(n, 'e'));
    EXPECT_TRUE(Call(*service, r).has_ack()) << n;
  }
  EXPECT_EQ(system.entropy.size(), 2u);
  EXPECT_EQ(system.entropy[1].size(), 512u);
}

TEST_F(ServiceFixture, SetLimitsWritesTheExecCgroupsFiles) {
  namespace fs = std::filesystem;
  // Without an exec cgroup there is nothing to limit.
  pb::Request r;
  r.set_id(5);
  r.mutable_set_limits()->set_exec_pids_max(64);
  EXPECT_EQ(Call(*Service(), r).error().code(), pb::Error::UNSUPPORTED);

  // A plain directory stands in for the cgroup.
  fs::path cg = fs::temp_directory_path() / ("deskbox-set-limits-" + std::to_string(::getpid()));
  fs::create_directories(cg);
  auto read = [&](const char* name) {
    std::ifstream f(cg / name);
    std::string v;
    f >> v;
    return v;
  };
  { std::ofstream(cg / "pids.max") << "1024\n"; }
  { std::ofstream(cg / "memory.max") << "max\n"; }
  AgentLimits limits;
  limits.exec.cgroup = cg.string();
  auto service = MakeService(real_processes, inline_tasks, limits);
  r.mutable_set_limits()->set_exec_pids_max(64);
  r.mutable_set_limits()->set_exec_memory_bytes(512ull << 20);
  EXPECT_TRUE(Call(*service, r).has_ack());
  EXPECT_EQ(read("pids.max"), "64");
  EXPECT_EQ(read("memory.max"), std::to_string(512ull << 20));
  // 0 leaves a limit as it is.
  r.mutable_set_limits()->set_exec_pids_max(0);
  r.mutable_set_limits()->set_exec_memory_bytes(256ull << 20);
  EXPECT_TRUE(Call(*service, r).has_ack());
  EXPECT_EQ(read("pids.max"), "64");
  EXPECT_EQ(read("memory.max"), std::to_string(256ull << 20));
  // Under 1 MiB is refused, and nothing is written.
  r.mutable_set_limits()->set_exec_pids_max(8);
  r.mutable_set_limits()->set_exec_memory_bytes(4096);
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::INVALID_ARGUMENT);
  EXPECT_EQ(read("pids.max"), "64");
  // A file that cannot be written is the error, with its path.
  fs::remove(cg / "pids.max");
  r.mutable_set_limits()->set_exec_pids_max(32);
  r.mutable_set_limits()->set_exec_memory_bytes(0);
  auto failed = Call(*service, r);
  ASSERT_TRUE(failed.has_error());
  EXPECT_NE(failed.error().message().find("pids.max"), std::string::npos) << failed.error().message();
  fs::remove_all(cg);
}

TEST_F(ServiceFixture, SetLimitsDiskGoesToRootsQuota) {
  pb::Request r;
  r.set_id(8);
  AgentLimits limits;
  limits.exec.cgroup = "/nonexistent-cgroup";  // never written: pids and memory stay 0
  // Without a base file (no --exec-disk-mib) a disk limit is unsupported, and nothing is set.
  auto none = MakeService(real_processes, inline_tasks, limits);
  r.mutable_set_limits()->set_exec_disk_bytes(64ull << 20);
  EXPECT_EQ(Call(*none, r).error().code(), pb::Error::UNSUPPORTED);
  EXPECT_TRUE(system.disk_limits.empty());

  limits.exec.disk_base_file = "/run/base-for-test";
  auto service = MakeService(real_processes, inline_tasks, limits);
  EXPECT_TRUE(Call(*service, r).has_ack());
  ASSERT_EQ(system.disk_limits, (std::vector<std::string>{"0 67108864 /run/base-for-test"}));
  // Under 1 MiB is refused before anything is set.
  r.mutable_set_limits()->set_exec_disk_bytes(1000);
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::INVALID_ARGUMENT);
  EXPECT_EQ(system.disk_limits.size(), 1u);
  // The quota call's error is the answer.
  system.fail_with = AgentError{pb::Error::UNSUPPORTED, "no quota"};
  r.mutable_set_limits()->set_exec_disk_bytes(32ull << 20);
  auto failed = Call(*service, r);
  ASSERT_TRUE(failed.has_error());
  EXPECT_EQ(failed.error().code(), pb::Error::UNSUPPORTED);
}

TEST_F(ServiceFixture, UnknownKindIsUnsupported) {
  auto service = Service();
  pb::Request r;
  r.set_id(77);
  auto response = Call(*service, r);
  EXPECT_EQ(response.id(), 77u);
  EXPECT_EQ(response.error().code(), pb::Error::UNSUPPORTED);
}

TEST_F(ServiceFixture, ExecArgvAndShell) {
  auto service = Service();
  auto response = Call(*service, ExecRequest(3, {"echo", "hello", "world"}));
  ASSERT_TRUE(response.has_exec()) << response.error().message();
  EXPECT_EQ(response.exec().stdout(), "hello world\n");
  EXPECT_EQ(response.exec().exit_code(), 0);

  auto shell = ShellRequest(4, "cat; echo err >&2; exit 7");
  shell.mutable_exec()->set_stdin("from stdin\n");
  response = Call(*service, shell);
  ASSERT_TRUE(response.has_exec());
  EXPECT_EQ(response.exec().stdout(), "from stdin\n");
  EXPECT_EQ(response.exec().stderr(), "err\n");
  EXPECT_EQ(response.exec().exit_code(), 7);
}

TEST_F(ServiceFixture, ExecEnvironmentIsMinimalPlusRequest) {
  auto service = Service();
  ::setenv("DESKBOX_TEST_LEAK", "1", 1);
  auto r = ShellRequest(1, "env | sort");
  (*r.mutable_exec()->mutable_env())["FOO"] = "bar";
  (*r.mutable_exec()->mutable_env())["LANG"] = "de_DE.UTF-8";
  auto response = Call(*service, r);
  ::unsetenv("DESKBOX_TEST_LEAK");
  const std::string& env = response.exec().stdout();
  EXPECT_NE(env.find("FOO=bar\n"), std::string::npos) << env;
  EXPECT_NE(env.find("HOME=/root\n"), std::string::npos);
  EXPECT_NE(env.find("DISPLAY=:0\n"), std::string::npos);
  EXPECT_NE(env.find("LANG=de_DE.UTF-8\n"), std::string::npos);
  EXPECT_NE(env.find("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"),
            std::string::npos);
  EXPECT_EQ(env.find("DESKBOX_TEST_LEAK"), std::string::npos);
}

TEST_F(ServiceFixture, ExecPathComesFromTheRequestEnv) {
  testing::TempDir dir;
  testing::WriteFileOrDie(dir.File("my-tool"), "#!/bin/sh\necho tool ran\n");
  ::chmod(dir.File("my-tool").c_str(), 0755);
  auto service = Service();
  auto r = ExecRequest(1, {"my-tool"});
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::NOT_FOUND);
  (*r.mutable_exec()->mutable_env())["PATH"] = dir.path() + ":/bin";
  EXPECT_EQ(Call(*service, r).exec().stdout(), "tool ran\n");
}

TEST_F(ServiceFixture, ExecValidation) {
  auto service = Service();
  struct Case {
    pb::Request request;
    pb::Error::Code code;
  };
  std::vector<Case> cases;
  auto both = ExecRequest(1, {"echo"});
  both.mutable_exec()->set_shell("echo");
  cases.push_back({both, pb::Error::INVALID_ARGUMENT});
  pb::Request neither;
  neither.set_id(1);
  neither.mutable_exec();
  cases.push_back({neither, pb::Error::INVALID_ARGUMENT});
  cases.push_back({ExecRequest(1, {""}), pb::Error::INVALID_ARGUMENT});
  cases.push_back({ExecRequest(1, {"echo", std::string("a\0b", 3)}), pb::Error::INVALID_ARGUMENT});
  auto bad_env = ExecRequest(1, {"echo"});
  (*bad_env.mutable_exec()->mutable_env())["A=B"] = "c";
  cases.push_back({bad_env, pb::Error::INVALID_ARGUMENT});
  auto empty_key = ExecRequest(1, {"echo"});
  (*empty_key.mutable_exec()->mutable_env())[""] = "c";
  cases.push_back({empty_key, pb::Error::INVALID_ARGUMENT});
  auto rel_cwd = ExecRequest(1, {"echo"});
  rel_cwd.mutable_exec()->set_cwd("tmp");
  cases.push_back({rel_cwd, pb::Error::INVALID_ARGUMENT});
  auto missing_cwd = ExecRequest(1, {"echo"});
  missing_cwd.mutable_exec()->set_cwd("/nonexistent-deskbox-dir");
  cases.push_back({missing_cwd, pb::Error::NOT_FOUND});
  auto file_cwd = ExecRequest(1, {"echo"});
  file_cwd.mutable_exec()->set_cwd("/bin/sh");
  cases.push_back({file_cwd, pb::Error::INVALID_ARGUMENT});
  auto long_timeout = ExecRequest(1, {"echo"});
  long_timeout.mutable_exec()->set_timeout_s(3601);
  cases.push_back({long_timeout, pb::Error::INVALID_ARGUMENT});
  auto big_cap = ExecRequest(1, {"echo"});
  big_cap.mutable_exec()->set_max_output_bytes((6u << 20) + 1);
  cases.push_back({big_cap, pb::Error::INVALID_ARGUMENT});
  cases.push_back({ExecRequest(1, {"/nonexistent/program"}), pb::Error::NOT_FOUND});
  for (size_t i = 0; i < cases.size(); ++i) {
    auto response = Call(*service, cases[i].request);
    ASSERT_TRUE(response.has_error()) << i;
    EXPECT_EQ(response.error().code(), cases[i].code) << i << ": " << response.error().message();
  }
}

TEST_F(ServiceFixture, ExecDefaultsAndCaps) {
  auto service = MakeService(fake_processes, inline_tasks);
  pb::Request r;
  r.set_id(1);
  r.mutable_exec()->set_shell("true");
  Call(*service, r);
  r.mutable_exec()->set_timeout_s(3600);
  r.mutable_exec()->set_max_output_bytes(6u << 20);
  r.mutable_exec()->set_cwd("/tmp");
  Call(*service, r);
  auto calls = fake_processes.Calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0].argv, (std::vector<std::string>{"/bin/sh", "-c", "true"}));
  EXPECT_EQ(calls[0].timeout, 60s);
  EXPECT_EQ(calls[0].max_output_bytes, 4u << 20);
  EXPECT_EQ(calls[0].cwd, "/root");
  EXPECT_EQ(calls[1].timeout, 3600s);
  EXPECT_EQ(calls[1].max_output_bytes, 6u << 20);
  EXPECT_EQ(calls[1].cwd, "/tmp");
}

TEST_F(ServiceFixture, ExecTruncationAndTimeoutAreReported) {
  auto service = Service();
  auto r = ShellRequest(1, "head -c 100000 /dev/zero; sleep 5");
  r.mutable_exec()->set_max_output_bytes(1000);
  r.mutable_exec()->set_timeout_s(1);
  auto response = Call(*service, r);
  ASSERT_TRUE(response.has_exec());
  EXPECT_TRUE(response.exec().truncated());
  EXPECT_TRUE(response.exec().timed_out());
  EXPECT_EQ(response.exec().stdout().size(), 1000u);
  EXPECT_EQ(response.exec().signal(), SIGKILL);
  EXPECT_EQ(response.exec().exit_code(), -1);
  EXPECT_GE(response.exec().duration_ms(), 900u);
}

TEST_F(ServiceFixture, MaximalExecResultFitsOneFrame) {
  auto service = MakeService(fake_processes, inline_tasks);
  fake_processes.handler = [](const ExecSpec& spec) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.stdout_data.assign(spec.max_output_bytes, 'o');
    o.stderr_data.assign(spec.max_output_bytes, 'e');
    o.truncated = true;
    return o;
  };
  auto r = ShellRequest(1, "x");
  r.mutable_exec()->set_max_output_bytes(6u << 20);
  auto response = Call(*service, r);
  EXPECT_LT(response.ByteSizeLong(), ::deskbox::desktop_images::kMaxFrameBytes);
}

TEST_F(ServiceFixture, PingIsNotBlockedByLongRequests) {
  ThreadTaskRunner tasks(4);
  auto service = MakeService(real_processes, tasks);
  service->Handle(ShellRequest(1, "sleep 1; echo slow"), rec.reply());
  pb::Request ping;
  ping.set_id(2);
  ping.mutable_ping();
  const auto start = std::chrono::steady_clock::now();
  service->Handle(ping, rec.reply());
  ASSERT_TRUE(rec.WaitFor(1));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms);
  EXPECT_EQ(rec.responses()[0].id(), 2u);
  ASSERT_TRUE(rec.WaitFor(2));
  EXPECT_EQ(rec.responses()[1].exec().stdout(), "slow\n");
}

TEST_F(ServiceFixture, BusyWhenAllWorkersAreTaken) {
  ThreadTaskRunner tasks(1);
  auto service = MakeService(real_processes, tasks);
  service->Handle(ShellRequest(1, "sleep 1"), rec.reply());
  service->Handle(ShellRequest(2, "true"), rec.reply());
  ASSERT_TRUE(rec.WaitFor(1));
  EXPECT_EQ(rec.responses()[0].id(), 2u);
  EXPECT_EQ(rec.responses()[0].error().code(), pb::Error::INTERNAL);
  ASSERT_TRUE(rec.WaitFor(2));
  EXPECT_TRUE(rec.responses()[1].has_exec());
}

TEST_F(ServiceFixture, FileRoundTripThroughTheService) {
  testing::TempDir dir;
  auto service = Service();
  const std::string content = testing::RandomBytes(700000, 11);
  const std::string path = dir.File("sub/data.bin");
  for (size_t off = 0; off < content.size(); off += 300000) {
    pb::Request w;
    w.set_id(50);
    auto* chunk = w.mutable_file_write();
    chunk->set_path(path);
    chunk->set_offset(off);
    chunk->set_data(content.substr(off, 300000));
    chunk->set_last(off + 300000 >= content.size());
    chunk->set_create_parents(true);
    service->Handle(w, rec.reply());
  }
  ASSERT_EQ(rec.responses().size(), 1u);
  ASSERT_TRUE(rec.responses()[0].has_ack()) << rec.responses()[0].error().message();

  pb::Request r;
  r.set_id(51);
  r.mutable_file_read()->set_path(path);
  service->Handle(r, rec.reply());
  auto responses = rec.responses();
  ASSERT_EQ(responses.size(), 4u);  // ack + 3 chunks of 256 KiB (default)
  std::string back;
  for (size_t i = 1; i < responses.size(); ++i) back += responses[i].file_chunk().data();
  EXPECT_EQ(back, content);
  EXPECT_TRUE(responses.back().file_chunk().final());
  // A relative path is refused before it takes a worker.
  r.mutable_file_read()->set_path("data.bin");
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::INVALID_ARGUMENT);
}

TEST_F(ServiceFixture, AbandonedWriteExpiresOnTick) {
  testing::TempDir dir;
  auto service = Service();
  pb::Request w;
  w.set_id(5);
  w.mutable_file_write()->set_path(dir.File("f"));
  w.mutable_file_write()->set_data("abc");
  service->Handle(w, rec.reply());
  clock.Advance(61s);
  service->Tick();
  ASSERT_EQ(rec.responses().size(), 1u);
  EXPECT_EQ(rec.responses()[0].error().code(), pb::Error::TIMEOUT);
  EXPECT_TRUE(testing::ListDir(dir.path()).empty());
}

TEST_F(ServiceFixture, ClipboardGetRunsXclip) {
  auto service = MakeService(fake_processes, inline_tasks);
  fake_processes.handler = [](const ExecSpec&) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.stdout_data = "copied \xe2\x9c\x93 text";
    return o;
  };
  pb::Request r;
  r.set_id(8);
  r.mutable_clipboard_get();
  auto response = Call(*service, r);
  EXPECT_EQ(response.clipboard().text(), "copied \xe2\x9c\x93 text");
  auto calls = fake_processes.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].argv, (std::vector<std::string>{"xclip", "-selection", "clipboard", "-o"}));
  EXPECT_NE(std::find(calls[0].env.begin(), calls[0].env.end(), "DISPLAY=:0"), calls[0].env.end());
  EXPECT_EQ(calls[0].max_output_bytes, 1u << 20);
  EXPECT_LE(calls[0].timeout, 10s);
}

TEST_F(ServiceFixture, ClipboardGetEdgeCases) {
  auto service = MakeService(fake_processes, inline_tasks);
  pb::Request r;
  r.set_id(8);
  r.mutable_clipboard_get();
  // Nothing owns the clipboard: empty text, not an error.
  fake_processes.handler = [](const ExecSpec&) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.exit_code = 1;
    o.stderr_data = "Error: target UTF8_STRING not available\n";
    return o;
  };
  auto response = Call(*service, r);
  ASSERT_TRUE(response.has_clipboard());
  EXPECT_EQ(response.clipboard().text(), "");
  // Too large.
  fake_processes.handler = [](const ExecSpec& spec) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.stdout_data.assign(spec.max_output_bytes, 'x');
    o.truncated = true;
    return o;
  };
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::TOO_LARGE);
  // Invalid UTF-8 is repaired, not passed on (the host could not parse the frame).
  fake_processes.handler = [](const ExecSpec&) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.stdout_data = "bad \xff byte";
    return o;
  };
  EXPECT_EQ(Call(*service, r).clipboard().text(), "bad \xef\xbf\xbd byte");
  // X is not there.
  fake_processes.handler = [](const ExecSpec&) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.exit_code = 1;
    o.stderr_data = "Error: Can't open display: :0\n";
    return o;
  };
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::INTERNAL);
  fake_processes.handler = [](const ExecSpec&) -> std::expected<ExecOutcome, AgentError> {
    ExecOutcome o;
    o.timed_out = true;
    return o;
  };
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::TIMEOUT);
}

TEST_F(ServiceFixture, ClipboardSet) {
  auto service = MakeService(fake_processes, inline_tasks);
  pb::Request r;
  r.set_id(9);
  r.mutable_clipboard_set()->set_text("hello \xc3\xa9");
  EXPECT_TRUE(Call(*service, r).has_ack());
  auto calls = fake_processes.Calls();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].argv, (std::vector<std::string>{"xclip", "-selection", "clipboard", "-i"}));
  EXPECT_EQ(calls[0].stdin_data, "hello \xc3\xa9");
  EXPECT_FALSE(calls[0].capture_output) << "xclip -i's daemon must not hold our pipes";
  r.mutable_clipboard_set()->set_text(std::string((1u << 20) + 1, 'x'));
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::TOO_LARGE);
  EXPECT_EQ(fake_processes.Calls().size(), 1u);
  r.mutable_clipboard_set()->set_text(std::string(1u << 20, 'x'));
  EXPECT_TRUE(Call(*service, r).has_ack());
}

TEST_F(ServiceFixture, ReadyReportsAndValidates) {
  desktop.SetAllUp();
  auto service = Service();
  pb::Request r;
  r.set_id(3);
  r.mutable_ready()->set_timeout_ms(5000);
  auto response = Call(*service, r);
  ASSERT_TRUE(response.has_ready());
  EXPECT_TRUE(response.ready().ready());
  EXPECT_EQ(response.ready().kernel_release(), "6.1.0-test-amd64");
  EXPECT_EQ(response.ready().screen_width(), 1280u);
  r.mutable_ready()->set_timeout_ms(600'001);
  EXPECT_EQ(Call(*service, r).error().code(), pb::Error::INVALID_ARGUMENT);
}

TEST_F(ServiceFixture, ErrorTextIsAlwaysUtf8) {
  auto service = Service();
  pb::Request r;
  r.set_id(1);
  // A path that is valid UTF-8 but whose error message would be fine too; force bad bytes
  // through a failing fake instead.
  system.fail_with = MakeError(pb::Error::INTERNAL, "bad \xfe bytes");
  r.mutable_set_clock()->set_unix_time_ns(1);
  auto response = Call(*service, r);
  EXPECT_EQ(response.error().message(), "bad \xef\xbf\xbd bytes");
}

}  // namespace
}  // namespace deskbox::agent

// Agent logs are off in tests unless DESKBOX_TEST_LOGS is set.
namespace {
struct QuietLogs {
  QuietLogs() { deskbox::agent::SetLogEnabled(std::getenv("DESKBOX_TEST_LOGS") != nullptr); }
} quiet_logs;
}  // namespace
