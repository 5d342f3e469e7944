// Ready requests: is the desktop up (X server, Chromium's DevTools, a painted Chromium window)
// and is the guest CPU quiet?
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent.pb.h"
#include "agent/clock.h"
#include "agent/desktop_probe.h"
#include "agent/system_control.h"

namespace deskbox::agent {

namespace pb = ::deskbox::agent::v1;

// --- parsers (pure; tested on canned text) ---

struct CpuTimes {
  uint64_t idle = 0;   // idle + iowait jiffies, all CPUs
  uint64_t total = 0;  // user..steal jiffies, all CPUs
};
// The aggregate "cpu" line of /proc/stat.
std::optional<CpuTimes> ParseProcStat(std::string_view proc_stat);

struct ScreenSize {
  uint32_t width = 0;
  uint32_t height = 0;
};
// "Width:"/"Height:" of `xwininfo -root`.
std::optional<ScreenSize> ParseRootGeometry(std::string_view xwininfo_root);
// Window ids ("0x...") of lines mentioning Chromium/chromium in `xwininfo -root -tree`.
std::vector<std::string> ChromiumWindowIds(std::string_view xwininfo_tree, size_t max_ids);
// `xwininfo -id <id>` says "Map State: IsViewable".
bool IsViewable(std::string_view xwininfo_window);
// The "Browser" field of /json/version, e.g. "Chrome/120.0.6099.71".
std::optional<std::string> ParseBrowserVersion(std::string_view json_version);
// /json/list holds a target of "type": "page".
bool HasPageTarget(std::string_view json_list);

// Idle fraction of the guest CPUs over the last `window`, from /proc/stat samples. Samples are
// taken by Ready requests only (no background sampling: an idle guest must stay idle).
class CpuIdleTracker {
 public:
  struct Sample {
    int64_t monotonic_ns = 0;
    CpuTimes times;
  };
  struct Result {
    double idle_fraction = 0;
    bool window_complete = false;  // the samples span [window, window + 1 s] back from now
  };
  explicit CpuIdleTracker(std::chrono::milliseconds window = std::chrono::milliseconds(2000))
      : window_ns_(std::chrono::nanoseconds(window).count()) {}
  void Add(const Sample& sample);
  Result Evaluate() const;
  size_t size() const { return samples_.size(); }

 private:
  int64_t window_ns_;
  std::deque<Sample> samples_;
};

struct ReadinessOptions {
  std::chrono::milliseconds poll_interval{250};
  std::chrono::milliseconds settle_window{2000};
  double settled_idle_fraction = 0.85;
  uint32_t max_timeout_ms = 600'000;  // longer ReadyRequest.timeout_ms is rejected
  size_t max_window_candidates = 8;
};

class ReadinessChecker {
 public:
  ReadinessChecker(Clock& clock, DesktopProbe& probe, SystemControl& system,
                   ReadinessOptions options = {});
  // Polls every poll_interval until ready or `timeout_ms` has passed (0: looks once), then
  // reports the last look. Never fails: what could not be checked is reported as not ready.
  // Thread-safe (concurrent Ready requests share the CPU samples).
  pb::ReadyReport Wait(uint32_t timeout_ms, bool require_settled);
  const ReadinessOptions& options() const { return options_; }

 private:
  // One look; `seen` is the previous look of the same wait (empty at first).
  pb::ReadyReport Observe(bool require_settled, const pb::ReadyReport& seen);

  Clock& clock_;
  DesktopProbe& probe_;
  SystemControl& system_;
  const ReadinessOptions options_;
  std::mutex mu_;
  CpuIdleTracker tracker_;  // guarded by mu_
  std::string kernel_release_;  // guarded by mu_
};

}  // namespace deskbox::agent
