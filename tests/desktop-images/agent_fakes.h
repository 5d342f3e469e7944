// Fakes of the agent's dependencies, and small helpers shared by the agent tests.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "agent.pb.h"
#include "agent/clock.h"
#include "agent/desktop_probe.h"
#include "agent/process.h"
#include "agent/reply.h"
#include "agent/system_control.h"

namespace deskbox::agent::testing {

// Time moves only when someone sleeps (or the test advances it).
class FakeClock final : public Clock {
 public:
  int64_t MonotonicNs() override { return mono_ns.load(); }
  int64_t RealtimeNs() override { return real_ns.load(); }
  void SleepFor(std::chrono::milliseconds d) override { Advance(d); }
  void Advance(std::chrono::nanoseconds d) {
    mono_ns += d.count();
    real_ns += d.count();
  }
  std::atomic<int64_t> mono_ns{1'000'000'000};
  std::atomic<int64_t> real_ns{1'700'000'000'000'000'000};
};

class FakeSystemControl final : public SystemControl {
 public:
  std::expected<void, AgentError> SetRealtime(int64_t ns) override;
  std::expected<void, AgentError> AddEntropyAndReseed(std::span<const uint8_t> bytes) override;
  std::string KernelRelease() override { return "6.1.0-test-amd64"; }
  std::expected<void, AgentError> LimitDiskGrowth(uint32_t uid, uint64_t bytes,
                                                  const std::string& base_file) override;

  std::mutex mu;
  std::vector<int64_t> clock_sets;
  std::vector<std::string> entropy;
  std::vector<std::string> disk_limits;  // "uid bytes base_file"
  std::optional<AgentError> fail_with;
};

class FakeProcessRunner final : public ProcessRunner {
 public:
  using Handler = std::function<std::expected<ExecOutcome, AgentError>(const ExecSpec&)>;
  std::expected<ExecOutcome, AgentError> Run(const ExecSpec& spec) override;
  std::vector<ExecSpec> Calls();

  Handler handler;  // default: exit 0, no output
  std::mutex mu;
  std::vector<ExecSpec> calls;
};

class FakeDesktopProbe final : public DesktopProbe {
 public:
  bool XServerAnswers() override { return x_up.load(); }
  std::expected<HttpResponse, std::string> DevToolsGet(std::string_view path) override;
  std::expected<std::string, std::string> ReadProcStat() override;
  std::expected<std::string, std::string> Xwininfo(const std::vector<std::string>& args) override;

  // A desktop that is fully up: X, DevTools, a page target and a mapped Chromium window.
  void SetAllUp();
  void SetAllUpLocked();

  std::mutex mu;
  std::atomic<bool> x_up{false};
  std::map<std::string, HttpResponse> http;        // path -> response; missing: refused
  std::map<std::string, std::string> xwininfo;     // args joined by ' ' -> stdout
  // Each ReadProcStat adds these jiffies (all CPUs) to the counters.
  uint64_t idle_per_read = 95, busy_per_read = 5;
  uint64_t idle_total = 1000, busy_total = 1000;
  int proc_stat_reads = 0;
  int up_after_reads = -1;
  int xwininfo_calls = 0;  // SetAllUp() during that ReadProcStat call
};

// Collects responses; thread-safe; can wait for a count.
class ReplyRecorder {
 public:
  Reply reply(bool delivered = true);
  std::vector<pb::Response> responses();
  // Waits (real time) until at least n responses arrived.
  bool WaitFor(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10));

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<pb::Response> responses_;
};

// A fresh directory under $TMPDIR, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

std::string ReadFileOrDie(const std::string& path);
void WriteFileOrDie(const std::string& path, std::string_view data);
std::vector<std::string> ListDir(const std::string& path);
std::string RandomBytes(size_t n, uint64_t seed);

// For fuzzing with the real filesystem: rewrites every absolute file path in `request` to a
// name under `root` (relative paths and paths with NUL stay: they are rejected before any
// filesystem access), and caps waits so a run stays fast.
void SandboxRequest(pb::Request& request, const std::string& root);

// Checks what the service promises about a batch of responses to one request; returns an
// empty string when all is well, else what is wrong.
std::string CheckResponses(const pb::Request& request, const std::vector<pb::Response>& responses);

}  // namespace deskbox::agent::testing
