#include "agent/readiness.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <nlohmann/json.hpp>

#include "agent/log.h"

namespace deskbox::agent {
namespace {

std::string_view NextLine(std::string_view& text) {
  const size_t eol = text.find('\n');
  std::string_view line = text.substr(0, eol);
  text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
  return line;
}

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

template <typename T>
std::optional<T> ParseUnsigned(std::string_view s) {
  s = TrimLeft(s);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.remove_suffix(1);
  T value{};
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<CpuTimes> ParseProcStat(std::string_view proc_stat) {
  while (!proc_stat.empty()) {
    std::string_view line = NextLine(proc_stat);
    if (!line.starts_with("cpu ")) continue;
    line.remove_prefix(4);
    uint64_t fields[8] = {};
    size_t count = 0;
    while (count < 8) {
      line = TrimLeft(line);
      if (line.empty()) break;
      const size_t end = line.find_first_of(" \t");
      auto value = ParseUnsigned<uint64_t>(line.substr(0, end));
      if (!value) return std::nullopt;
      fields[count++] = *value;
      line = end == std::string_view::npos ? std::string_view() : line.substr(end);
    }
    if (count < 4) return std::nullopt;  // user nice system idle at least
    CpuTimes times;
    times.idle = fields[3] + fields[4];  // idle + iowait
    for (size_t i = 0; i < count; ++i) {
      if (times.total > UINT64_MAX - fields[i]) return std::nullopt;
      times.total += fields[i];
    }
    return times;
  }
  return std::nullopt;
}

std::optional<ScreenSize> ParseRootGeometry(std::string_view xwininfo_root) {
  std::optional<uint32_t> width, height;
  while (!xwininfo_root.empty()) {
    std::string_view line = TrimLeft(NextLine(xwininfo_root));
    if (line.starts_with("Width:")) width = ParseUnsigned<uint32_t>(line.substr(6));
    if (line.starts_with("Height:")) height = ParseUnsigned<uint32_t>(line.substr(7));
  }
  if (!width || !height || *width == 0 || *height == 0) return std::nullopt;
  return ScreenSize{*width, *height};
}

std::vector<std::string> ChromiumWindowIds(std::string_view xwininfo_tree, size_t max_ids) {
  std::vector<std::string> ids;
  while (!xwininfo_tree.empty() && ids.size() < max_ids) {
    std::string_view line = TrimLeft(NextLine(xwininfo_tree));
    if (!line.starts_with("0x")) continue;
    if (line.find("Chromium") == std::string_view::npos &&
        line.find("chromium") == std::string_view::npos) {
      continue;
    }
    const size_t end = line.find(' ');
    std::string_view id = line.substr(0, end);
    if (id.size() < 3 || id.size() > 18) continue;
    if (!std::all_of(id.begin() + 2, id.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; })) {
      continue;
    }
    ids.emplace_back(id);
  }
  return ids;
}

bool IsViewable(std::string_view xwininfo_window) {
  while (!xwininfo_window.empty()) {
    std::string_view line = TrimLeft(NextLine(xwininfo_window));
    if (line.starts_with("Map State:")) {
      return TrimLeft(line.substr(10)).starts_with("IsViewable");
    }
  }
  return false;
}

std::optional<std::string> ParseBrowserVersion(std::string_view json_version) {
  const auto doc = nlohmann::json::parse(json_version, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  const auto it = doc.find("Browser");
  if (it == doc.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

bool HasPageTarget(std::string_view json_list) {
  const auto doc = nlohmann::json::parse(json_list, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_array()) return false;
  for (const auto& target : doc) {
    if (!target.is_object()) continue;
    const auto it = target.find("type");
    if (it != target.end() && it->is_string() && it->get_ref<const std::string&>() == "page") {
      return true;
    }
  }
  return false;
}

void CpuIdleTracker::Add(const Sample& sample) {
  if (!samples_.empty() && (sample.monotonic_ns < samples_.back().monotonic_ns ||
                            sample.times.total < samples_.back().times.total ||
                            sample.times.idle < samples_.back().times.idle)) {
    samples_.clear();  // counters or clock went backwards: start over
  }
  samples_.push_back(sample);
  // Keep everything inside the window, plus the newest sample older than it (the anchor).
  while (samples_.size() > 2 && sample.monotonic_ns - samples_[1].monotonic_ns >= window_ns_) {
    samples_.pop_front();
  }
  while (samples_.size() > 64) samples_.pop_front();
}

CpuIdleTracker::Result CpuIdleTracker::Evaluate() const {
  Result result;
  if (samples_.size() < 2) return result;
  const Sample& now = samples_.back();
  const Sample& anchor = samples_.front();  // the oldest kept: the anchor if there is one
  const int64_t span = now.monotonic_ns - anchor.monotonic_ns;
  const uint64_t total = now.times.total - anchor.times.total;
  if (total == 0) return result;
  result.idle_fraction =
      std::clamp(static_cast<double>(now.times.idle - anchor.times.idle) / total, 0.0, 1.0);
  // "The last 2 s": an anchor much older than the window averages in older activity.
  result.window_complete = span >= window_ns_ && span <= window_ns_ + 1'000'000'000;
  return result;
}

ReadinessChecker::ReadinessChecker(Clock& clock, DesktopProbe& probe, SystemControl& system,
                                   ReadinessOptions options)
    : clock_(clock),
      probe_(probe),
      system_(system),
      options_(options),
      tracker_(options.settle_window) {}

pb::ReadyReport ReadinessChecker::Observe(bool require_settled, const pb::ReadyReport& seen) {
  pb::ReadyReport report;
  // Once X, DevTools and the painted window have all been seen during this wait, later polls
  // only sample the CPU: spawning xwininfo four times a second would itself keep the guest
  // from settling under emulation.
  const bool desktop_seen = seen.x_ready() && seen.cdp_ready() && seen.first_paint();
  if (desktop_seen) {
    report = seen;
  } else {
    report.set_x_ready(probe_.XServerAnswers());
    if (auto version = probe_.DevToolsGet("/json/version"); version && version->status == 200) {
      if (auto browser = ParseBrowserVersion(version->body)) {
        report.set_cdp_ready(true);
        report.set_chromium_version(std::move(*browser));
      }
    }
    bool page = false;
    if (report.cdp_ready()) {
      auto list = probe_.DevToolsGet("/json/list");
      page = list && list->status == 200 && HasPageTarget(list->body);
    }
    bool window = seen.first_paint();  // a window once mapped is not looked up again
    if (page && report.x_ready() && !window) {
      if (auto tree = probe_.Xwininfo({"-root", "-tree"})) {
        for (const auto& id : ChromiumWindowIds(*tree, options_.max_window_candidates)) {
          auto info = probe_.Xwininfo({"-id", id});
          if (info && IsViewable(*info)) {
            window = true;
            break;
          }
        }
      }
    }
    report.set_first_paint(page && window);
  }

  CpuIdleTracker::Result cpu;
  {
    // Reading and recording under one lock keeps samples of concurrent waits in order.
    std::lock_guard lock(mu_);
    auto stat = probe_.ReadProcStat();
    if (auto times = stat ? ParseProcStat(*stat) : std::nullopt) {
      tracker_.Add({clock_.MonotonicNs(), *times});
    }
    cpu = tracker_.Evaluate();
    if (kernel_release_.empty()) kernel_release_ = system_.KernelRelease();
    report.set_kernel_release(kernel_release_);
  }
  report.set_idle_fraction(cpu.idle_fraction);
  report.set_settled(cpu.window_complete && cpu.idle_fraction >= options_.settled_idle_fraction);
  report.set_ready(report.x_ready() && report.cdp_ready() && report.first_paint() &&
                   (report.settled() || !require_settled));
  return report;
}

pb::ReadyReport ReadinessChecker::Wait(uint32_t timeout_ms, bool require_settled) {
  const int64_t start = clock_.MonotonicNs();
  const int64_t deadline = start + int64_t{timeout_ms} * 1'000'000;
  pb::ReadyReport report;
  for (;;) {
    report = Observe(require_settled, report);
    const int64_t now = clock_.MonotonicNs();
    if (report.ready() || now >= deadline) break;
    const int64_t left_ms = (deadline - now + 999'999) / 1'000'000;
    clock_.SleepFor(std::min(options_.poll_interval, std::chrono::milliseconds(left_ms)));
  }
  if (report.x_ready()) {
    if (auto root = probe_.Xwininfo({"-root"})) {
      if (auto size = ParseRootGeometry(*root)) {
        report.set_screen_width(size->width);
        report.set_screen_height(size->height);
      }
    }
  }
  return report;
}

}  // namespace deskbox::agent
