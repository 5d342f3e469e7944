#include "agent_fakes.h"

#include <dirent.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace deskbox::agent::testing {

std::expected<void, AgentError> FakeSystemControl::SetRealtime(int64_t ns) {
  std::lock_guard lock(mu);
  if (fail_with) return std::unexpected(*fail_with);
  clock_sets.push_back(ns);
  return {};
}

std::expected<void, AgentError> FakeSystemControl::AddEntropyAndReseed(
    std::span<const uint8_t> bytes) {
  std::lock_guard lock(mu);
  if (fail_with) return std::unexpected(*fail_with);
  entropy.emplace_back(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  return {};
}

std::expected<void, AgentError> FakeSystemControl::LimitDiskGrowth(uint32_t uid, uint64_t bytes,
                                                                   const std::string& base_file) {
  std::lock_guard lock(mu);
  if (fail_with) return std::unexpected(*fail_with);
  disk_limits.push_back(std::to_string(uid) + " " + std::to_string(bytes) + " " + base_file);
  return {};
}

std::expected<ExecOutcome, AgentError> FakeProcessRunner::Run(const ExecSpec& spec) {
  Handler h;
  {
    std::lock_guard lock(mu);
    calls.push_back(spec);
    h = handler;
  }
  if (h) return h(spec);
  return ExecOutcome{};
}

std::vector<ExecSpec> FakeProcessRunner::Calls() {
  std::lock_guard lock(mu);
  return calls;
}

std::expected<HttpResponse, std::string> FakeDesktopProbe::DevToolsGet(std::string_view path) {
  std::lock_guard lock(mu);
  auto it = http.find(std::string(path));
  if (it == http.end()) return std::unexpected("connect: Connection refused");
  return it->second;
}

std::expected<std::string, std::string> FakeDesktopProbe::ReadProcStat() {
  std::lock_guard lock(mu);
  if (++proc_stat_reads == up_after_reads) SetAllUpLocked();
  idle_total += idle_per_read;
  busy_total += busy_per_read;
  // user nice system idle iowait irq softirq steal guest guest_nice
  std::ostringstream out;
  out << "cpu  " << busy_total << " 0 0 " << idle_total << " 0 0 0 0 0 0\n"
      << "cpu0 1 0 0 1 0 0 0 0 0 0\nintr 12345 1 2 3\n";
  return out.str();
}

std::expected<std::string, std::string> FakeDesktopProbe::Xwininfo(
    const std::vector<std::string>& args) {
  std::string key;
  for (const auto& a : args) key += (key.empty() ? "" : " ") + a;
  std::lock_guard lock(mu);
  ++xwininfo_calls;
  auto it = xwininfo.find(key);
  if (it == xwininfo.end()) return std::unexpected("xwininfo exited 1: no such window");
  return it->second;
}

void FakeDesktopProbe::SetAllUp() {
  std::lock_guard lock(mu);
  SetAllUpLocked();
}

void FakeDesktopProbe::SetAllUpLocked() {
  x_up = true;
  http["/json/version"] = {200, R"({"Browser": "Chrome/120.0.6099.71", "Protocol-Version": "1.3"})"};
  http["/json/list"] = {200, R"([{"id": "A1", "type": "page", "url": "about:blank"}])"};
  xwininfo["-root -tree"] =
      "\nxwininfo: Window id: 0x1e3 (the root window) (has no name)\n\n"
      "  Root window id: 0x1e3 (the root window) (has no name)\n"
      "  Parent window id: 0x0 (none)\n"
      "     2 children:\n"
      "     0x400001 \"chromium\": (\"chromium\" \"Chromium\")  10x10+-100+-100  +-100+-100\n"
      "     0x600003 \"New Tab - Chromium\": (\"chromium\" \"Chromium\")  1280x800+0+0  +0+0\n";
  xwininfo["-id 0x400001"] = "  Map State: IsUnMapped\n";
  xwininfo["-id 0x600003"] = "  Class: InputOutput\n  Map State: IsViewable\n";
  xwininfo["-root"] =
      "\nxwininfo: Window id: 0x1e3 (the root window) (has no name)\n\n"
      "  Absolute upper-left X:  0\n  Width: 1280\n  Height: 800\n  Depth: 24\n";
}

Reply ReplyRecorder::reply(bool delivered) {
  return [this, delivered](pb::Response response) {
    std::lock_guard lock(mu_);
    responses_.push_back(std::move(response));
    cv_.notify_all();
    return delivered;
  };
}

std::vector<pb::Response> ReplyRecorder::responses() {
  std::lock_guard lock(mu_);
  return responses_;
}

bool ReplyRecorder::WaitFor(size_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return responses_.size() >= n; });
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "deskbox-agent-test-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string ReadFileOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) std::abort();
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void WriteFileOrDie(const std::string& path, std::string_view data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) std::abort();
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec)) {
    names.push_back(e.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

namespace {

std::string SandboxPath(const std::string& path, const std::string& root) {
  if (path.empty() || path.front() != '/' || path.find('\0') != std::string::npos) return path;
  std::string name;
  for (char c : path) {
    if (name.size() >= 24) break;
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-') name += c;
  }
  if (name.empty() || name == "." || name == "..") name = "f";
  // Sometimes one directory down, to reach create_parents.
  return root + ((path.size() % 3 == 0) ? "/d/" : "/") + name;
}

}  // namespace

void SandboxRequest(pb::Request& request, const std::string& root) {
  if (request.has_file_read()) {
    request.mutable_file_read()->set_path(SandboxPath(request.file_read().path(), root));
  }
  if (request.has_file_write()) {
    request.mutable_file_write()->set_path(SandboxPath(request.file_write().path(), root));
  }
  if (request.has_ready() && request.ready().timeout_ms() <= 600'000) {
    request.mutable_ready()->set_timeout_ms(request.ready().timeout_ms() % 2000);
  }
}

std::string CheckResponses(const pb::Request& request, const std::vector<pb::Response>& responses) {
  for (const auto& r : responses) {
    if (r.id() != request.id()) return "response with another id";
    if (r.kind_case() == pb::Response::KIND_NOT_SET) return "response without a kind";
    std::string bytes;
    if (!r.SerializeToString(&bytes)) return "response does not serialize";
    pb::Response back;
    if (!back.ParseFromString(bytes)) return "response does not parse back (UTF-8?)";
    if (bytes.size() > (16u << 20)) return "response over the frame limit";
  }
  switch (request.kind_case()) {
    case pb::Request::kFileWrite:
      if (responses.size() > 1) return "more than one answer to a file_write chunk";
      if (responses.size() == 1 && !responses[0].has_ack() && !responses[0].has_error()) {
        return "file_write answered with something else";
      }
      break;
    case pb::Request::kFileRead: {
      if (responses.empty()) return "file_read without an answer";
      for (size_t i = 0; i + 1 < responses.size(); ++i) {
        if (!responses[i].has_file_chunk() || responses[i].file_chunk().final()) {
          return "file_read stream broken before its end";
        }
      }
      const auto& last = responses.back();
      if (!last.has_error() && !(last.has_file_chunk() && last.file_chunk().final())) {
        return "file_read stream without a final chunk or an error";
      }
      break;
    }
    default:
      if (responses.size() != 1) return "not exactly one answer";
  }
  return "";
}

}  // namespace deskbox::agent::testing
