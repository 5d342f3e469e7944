#include "recording_routes.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/redirect_error.hpp>
#include <filesystem>
#include <set>

#include "common/files.h"
#include "common/log.h"
#include "common/unique_fd.h"
#include "common/sha256.h"
#include "recorder/event_log.h"
#include "recorder/mp4_fragments.h"
#include "recorder/mp4_join.h"
#include "replay_page.h"

namespace deskbox::api {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace vb = vnc_bridge;
using boost::beast::http::verb;
using nlohmann::json;
using namespace std::chrono_literals;
using vmhost::SandboxState;

namespace {

constexpr char kRecordingLog[] = "recording";
constexpr auto kSweepEvery = 10min;
constexpr size_t kReadPiece = 256 * 1024;
constexpr uint64_t kMaxLiveScan = uint64_t{1} << 30;  // a live segment read to find its whole part

uint64_t Mib(uint64_t n) { return n << 20; }

bool Ended(SandboxState s) { return s == SandboxState::kStopped || s == SandboxState::kFailed; }

// Bytes of the segment files in `dir`, and the highest index + 1 among them.
struct DirUsage {
  uint64_t bytes = 0;
  uint32_t next_index = 0;
  size_t files = 0;
};
DirUsage Usage(const std::string& dir) {
  DirUsage u;
  std::error_code ec;
  for (const auto& f : fs::directory_iterator(dir, ec)) {
    auto n = recorder::ParseSegmentFile(f.path().filename().string());
    if (!n) continue;
    std::error_code sec;
    auto size = f.file_size(sec);
    if (sec) continue;
    u.bytes += size;
    u.next_index = std::max(u.next_index, *n + 1);
    ++u.files;
  }
  return u;
}

// The part of a segment being written that plays: its whole fragments.
uint64_t WholeLength(const std::string& path) {
  auto bytes = ReadFile(path, kMaxLiveScan);
  if (!bytes) return 0;
  auto layout = recorder::ScanFragments(*bytes);
  if (!layout || layout->fragments == 0) return 0;
  return layout->whole_length;
}

// One "bytes=" range of a body of `size` bytes: [first, last], nullopt when the header asks for
// something else (several ranges, another unit: the whole body is sent), or 416 (unsatisfiable).
struct ByteRange {
  uint64_t first = 0, last = 0;
};
std::expected<std::optional<ByteRange>, HttpResponse> ParseRange(std::string_view h, uint64_t size) {
  if (h.empty() || !h.starts_with("bytes=")) return std::nullopt;
  std::string_view spec = h.substr(6);
  if (spec.find(',') != std::string_view::npos) return std::nullopt;
  auto dash = spec.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  auto number = [](std::string_view s) -> std::optional<uint64_t> {
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string_view::npos)
      return std::nullopt;
    return std::stoull(std::string(s));
  };
  auto unsatisfiable = [&] {
    auto r = Error(416, "range_not_satisfiable",
                   fmt::format("the range '{}' is outside the {} bytes there are", h, size));
    r.headers.emplace_back("Content-Range", fmt::format("bytes */{}", size));
    return r;
  };
  std::string_view a = spec.substr(0, dash), b = spec.substr(dash + 1);
  if (a.empty()) {  // the last b bytes
    auto n = number(b);
    if (!n) return std::nullopt;
    if (*n == 0 || size == 0) return std::unexpected(unsatisfiable());
    return ByteRange{size - std::min(*n, size), size - 1};
  }
  auto first = number(a);
  if (!first) return std::nullopt;
  std::optional<uint64_t> last = b.empty() ? std::optional<uint64_t>(UINT64_MAX) : number(b);
  if (!last || *last < *first) return std::nullopt;
  if (*first >= size) return std::unexpected(unsatisfiable());
  return ByteRange{*first, std::min(*last, size - 1)};
}

std::string QuoteEtag(std::string_view hex) { return fmt::format("\"{}\"", hex.substr(0, 32)); }

}  // namespace

bool RecordingRetained(const DaemonConfig& config, const std::string& id) {
  if (!recorder::IsValidSandboxId(id)) return false;
  return Usage(config.recording_dir + "/" + id).files > 0;
}

struct RecordingRoutes::Live {
  explicit Live(asio::any_io_executor ex) : pace(ex) {}
  std::shared_ptr<recorder::ScreenRecorder> recorder;
  std::shared_ptr<vb::FrameMirror> mirror;
  asio::steady_timer pace;
  std::chrono::steady_clock::time_point last_offer{};
  int64_t last_update_ms = 0;  // when the screen last changed (Unix ms): the frame's time
  bool pending = false;
  std::optional<uint32_t> open_index;  // the segment being written
};

struct RecordingRoutes::Recording {
  recorder::RecordingIndex index;
  bool loaded = false;
  bool loading = false;
  std::vector<std::shared_ptr<asio::steady_timer>> load_waiters;
  std::vector<recorder::v1::Recording> emitted_while_loading;
  std::string problem;  // why recording stopped, until it starts again
  bool starting = false;
  uint64_t dropped = 0;
};

template <typename F>
auto RecordingRoutes::OnPool(F& f) -> asio::awaitable<decltype(f())> {
  // Resumes on the pool's thread (the handler is bound to the pool), then back on the io_context.
  // The executor is copied: once back, the caller checks `alive_` before touching anything of
  // this object's (it may have been destroyed while the pool worked).
  auto ex = ctx_.executor;
  co_await asio::post(pool_, asio::bind_executor(pool_, asio::use_awaitable));
  auto result = f();
  co_await asio::post(ex, asio::use_awaitable);
  co_return result;
}

RecordingRoutes::RecordingRoutes(ApiContext& ctx, ScreenMirrors& mirrors)
    : ctx_(ctx), mirrors_(mirrors), sweep_timer_(ctx.executor) {}

RecordingRoutes::~RecordingRoutes() {
  *alive_ = false;
  sweep_timer_.cancel();
  for (auto& [id, l] : live_) {
    if (l->mirror) l->mirror->SetOnUpdate(nullptr);
    auto rec = l->recorder;
    asio::post(pool_, [rec, now = ctx_.clock.NowMs()] { rec->Stop(now); });
  }
  live_.clear();
  pool_.join();
}

void RecordingRoutes::Register(Router& router) {
  auto add = [&](verb m, const char* pattern, Access access, Reply (RecordingRoutes::*h)(Call&)) {
    router.Add({.method = m,
                .pattern = pattern,
                .access = std::move(access),
                .handler = [this, h](Call& c) { return (this->*h)(c); }});
  };
  using S = Scope;
  add(verb::get, "/v1/sandboxes/{id}/recording", Access::Tokens({S::kReplay}).InQuery(),
      &RecordingRoutes::GetRecording);
  add(verb::get, "/v1/sandboxes/{id}/recording.mp4", Access::Tokens({S::kReplay}).InQuery(),
      &RecordingRoutes::GetJoined);
  add(verb::get, "/v1/sandboxes/{id}/recording/segments/{target}",
      Access::Tokens({S::kReplay}).InQuery(), &RecordingRoutes::GetSegment);
  add(verb::delete_, "/v1/sandboxes/{id}/recording", Access::KeysOnly(),
      &RecordingRoutes::DeleteRecording);
  add(verb::get, "/v1/sandboxes/{id}/events/head",
      Access::Tokens({S::kView, S::kControl, S::kReplay}).InQuery(), &RecordingRoutes::GetHead);
  add(verb::get, "/v1/sandboxes/{id}/events/verify", Access::Tokens({S::kReplay}).InQuery(),
      &RecordingRoutes::Verify);
  add(verb::get, "/v1/sandboxes/{id}/replay", Access::Tokens({S::kReplay}).InQuery(),
      &RecordingRoutes::ReplayPage);
}

std::string RecordingRoutes::DirOf(const std::string& id) const {
  return ctx_.config.recording_dir + "/" + id;
}

RecordingRoutes::Recording& RecordingRoutes::RecordingOf(const std::string& id) {
  auto& r = recordings_[id];
  if (!r) r = std::make_unique<Recording>();
  return *r;
}

RecordingRoutes::Totals RecordingRoutes::totals() const {
  Totals t = totals_;
  t.recording = live_.size();
  for (const auto& [id, l] : live_) t.dropped_frames += l->recorder->stats().dropped;
  return t;
}

void RecordingRoutes::Emit(const std::string& id, recorder::v1::Recording r) {
  auto& rec = RecordingOf(id);
  rec.index.Apply(r);
  if (rec.loading) rec.emitted_while_loading.push_back(r);
  auto e = SystemEvent(id);
  *e.mutable_recording() = std::move(r);
  ctx_.events.Emit(std::move(e));
}

asio::awaitable<void> RecordingRoutes::LoadIndex(const std::string& id) {
  auto alive = alive_;
  auto& rec = RecordingOf(id);
  if (rec.loaded) co_return;
  if (rec.loading) {
    auto t = std::make_shared<asio::steady_timer>(ctx_.executor, std::chrono::steady_clock::time_point::max());
    rec.load_waiters.push_back(t);
    boost::system::error_code ec;
    co_await t->async_wait(asio::redirect_error(asio::use_awaitable, ec));
    co_return;  // (the caller checks alive_)
  }
  rec.loading = true;
  std::string path = ctx_.events.LogPath(id);
  auto& events = ctx_.events;
  std::string error;
  auto read_index = [&events, path, &error] {
    events.Flush();
    return recorder::ReadRecordingIndex(path, &error);
  };
  auto index = co_await OnPool(read_index);
  if (!*alive) co_return;
  if (!error.empty()) log::Warn(kRecordingLog, "sandbox {}: event log: {}", id, error);
  auto& now = RecordingOf(id);
  for (const auto& r : now.emitted_while_loading) index.Apply(r);
  now.emitted_while_loading.clear();
  now.index = std::move(index);
  now.loaded = true;
  now.loading = false;
  for (auto& t : now.load_waiters) t->cancel();
  now.load_waiters.clear();
}

void RecordingRoutes::OnSandboxState(const SandboxRecord& r, SandboxState) {
  if (r.state == SandboxState::kRunning) {
    if (r.recording && !stopping_ && !live_.contains(r.id))
      asio::co_spawn(ctx_.executor, StartRecorder(r.id), asio::detached);
    return;
  }
  StopRecorder(r.id, ctx_.clock.NowMs());
}

asio::awaitable<void> RecordingRoutes::StartRecorder(std::string id) {
  auto alive = alive_;
  auto& rec = RecordingOf(id);
  if (rec.starting) co_return;
  rec.starting = true;
  co_await LoadIndex(id);
  if (!*alive) co_return;
  // What a deskboxd that stopped without finishing left: a segment cut back to its whole
  // fragments, or a whole one whose event never reached the log.
  std::string dir = DirOf(id);
  std::vector<uint32_t> listed;
  for (const auto& s : RecordingOf(id).index.Segments()) listed.push_back(s.index);
  uint32_t below = RecordingOf(id).index.deleted_below();
  struct Found {
    std::vector<recorder::FinishedSegment> segments;
    uint32_t next_index = 0;
    std::string error;
  };
  auto reconcile = [dir, listed, below] {
    Found f;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) {
      f.error = fmt::format("{}: {}", dir, ec.message());
      return f;
    }
    auto repaired = recorder::RepairSegments(dir);
    if (!repaired) {
      f.error = repaired.error().message;
      return f;
    }
    std::set<uint32_t> cut;
    for (auto& s : *repaired) {
      cut.insert(s.index);
      if (s.index >= below) f.segments.push_back(std::move(s));
    }
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      auto n = recorder::ParseSegmentFile(e.path().filename().string());
      if (!n || *n < below || cut.contains(*n) ||
          std::find(listed.begin(), listed.end(), *n) != listed.end())
        continue;
      recorder::FinishedSegment s{.index = *n, .path = e.path().string()};
      std::error_code sec;
      s.bytes = e.file_size(sec);
      if (auto d = Sha256File(s.path)) s.sha256 = ToHex(*d);
      f.segments.push_back(std::move(s));
    }
    f.next_index = Usage(dir).next_index;
    // A cut segment's duration: what its whole fragments hold (in end_ms), and when it was last
    // written (in start_ms), for a segment whose "started" event never reached the log.
    for (auto& s : f.segments) {
      if (auto plan = recorder::PlanJoin({{s.path, s.bytes}})) s.end_ms = plan->duration_ms;
      struct stat st {};
      if (::stat(s.path.c_str(), &st) == 0)
        s.start_ms = int64_t{st.st_mtim.tv_sec} * 1000 + st.st_mtim.tv_nsec / 1'000'000;
    }
    return f;
  };
  auto found = co_await OnPool(reconcile);
  if (!*alive) co_return;
  auto& now = RecordingOf(id);
  now.starting = false;
  if (!found.error.empty()) {
    Fail(id, found.error);
    co_return;
  }
  for (auto& s : found.segments) {
    if (now.index.Listed(s.index)) continue;
    int64_t start = now.index.StartOf(s.index);
    // No "started" event reached the log: the file's last write is its end.
    if (!start && s.start_ms > 0) start = s.start_ms - s.end_ms;
    recorder::v1::Recording r;
    r.set_phase("segment");
    r.set_index(s.index);
    r.set_file(recorder::SegmentFile(s.index));
    r.set_start_unix_ms(start);
    r.set_end_unix_ms(start ? start + s.end_ms : 0);
    r.set_bytes(s.bytes);
    r.set_sha256(s.sha256);
    r.set_truncated(s.truncated);
    r.set_detail(s.truncated ? "cut back to its last whole fragment: deskboxd stopped while writing it"
                             : "finished, but deskboxd stopped before logging it");
    Emit(id, std::move(r));
  }
  const SandboxRecord* r = ctx_.sandboxes.Find(id);
  auto sb = ctx_.manager.Find(id);
  if (!r || !r->recording || r->state != SandboxState::kRunning || !sb ||
      sb->state() != SandboxState::kRunning || live_.contains(id) || stopping_)
    co_return;
  if (over_quota_) {
    Fail(id, fmt::format("the recordings quota ({} MiB) is used up", ctx_.config.recording_quota_mib));
    co_return;
  }
  now.problem.clear();
  uint32_t first = std::max(now.index.next_index(), found.next_index);
  const auto& cfg = ctx_.config;
  recorder::RecorderSettings settings{
      .dir = dir,
      .encoder = {.keyframe_every = std::chrono::seconds(cfg.recording_keyframe_s),
                  .max_fps = static_cast<int>(cfg.recording_fps)},
      .segment_max = std::chrono::seconds(cfg.recording_segment_s),
      .queue_frames = 2,
      // The service's clock, as for the frames' own times.
      .now_ms = [&clock = ctx_.clock] { return clock.NowMs(); }};
  auto ex = ctx_.executor;
  settings.on_open = [this, ex, alive, id](uint32_t index, int64_t start_ms) {
    asio::post(ex, [this, alive, id, index, start_ms] {
      if (!*alive) return;
      if (auto it = live_.find(id); it != live_.end()) it->second->open_index = index;
      recorder::v1::Recording r;
      r.set_phase("started");
      r.set_index(index);
      r.set_file(recorder::SegmentFile(index));
      r.set_start_unix_ms(start_ms);
      Emit(id, std::move(r));
    });
  };
  auto live = std::make_unique<Live>(ctx_.executor);
  live->recorder = std::make_shared<recorder::ScreenRecorder>(
      std::move(settings),
      [this, ex, alive, id](const recorder::FinishedSegment& s) {
        asio::post(ex, [this, alive, id, s] {
          if (*alive) OnSegment(id, s);
        });
      },
      first);
  live->mirror = mirrors_.Get(id, sb->slot());
  live->mirror->SetOnUpdate([this, id] { OnUpdate(id); });
  bool ready = live->mirror->ready();
  live_.emplace(id, std::move(live));
  log::Info(kRecordingLog, "sandbox {}: recording from segment {}", id, first);
  if (ready) Offer(id);
}

void RecordingRoutes::StopRecorder(const std::string& id, int64_t end_ms) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  auto l = std::move(it->second);
  live_.erase(it);
  if (l->mirror) l->mirror->SetOnUpdate(nullptr);
  l->pace.cancel();
  auto rec = l->recorder;
  RecordingOf(id).dropped += rec->stats().dropped;
  totals_.dropped_frames += rec->stats().dropped;
  ++finishing_[id];
  // Stop reports the last segment by posting OnSegment to the executor; what is posted after it
  // runs after that.
  asio::post(pool_, [this, rec, end_ms, id, ex = ctx_.executor, alive = alive_] {
    rec->Stop(end_ms);
    asio::post(ex, [this, id, alive] {
      if (!*alive) return;
      if (auto it = finishing_.find(id); it != finishing_.end() && --it->second <= 0) finishing_.erase(it);
    });
  });
}

void RecordingRoutes::Fail(const std::string& id, const std::string& why) {
  log::Warn(kRecordingLog, "sandbox {}: recording stopped: {}", id, why);
  auto& rec = RecordingOf(id);
  rec.problem = why;
  ++totals_.failures;
  recorder::v1::Recording r;
  r.set_phase("failed");
  r.set_detail(why);
  r.set_dropped_frames(rec.dropped);
  Emit(id, std::move(r));
  StopRecorder(id, ctx_.clock.NowMs());
}

void RecordingRoutes::OnUpdate(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  it->second->last_update_ms = ctx_.clock.NowMs();
  Pace(id);
}

void RecordingRoutes::Pace(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = *it->second;
  if (l.pending) return;
  auto interval = std::chrono::microseconds(1'000'000 / std::max<uint32_t>(1, ctx_.config.recording_fps));
  auto now = std::chrono::steady_clock::now();
  if (now - l.last_offer >= interval) {
    Offer(id);
    return;
  }
  // Within the frame interval: the screen as it is when the interval ends.
  l.pending = true;
  l.pace.expires_at(l.last_offer + interval);
  l.pace.async_wait([this, alive = alive_, id](boost::system::error_code ec) {
    if (ec || !*alive) return;
    auto it = live_.find(id);
    if (it == live_.end()) return;
    it->second->pending = false;
    Offer(id);
  });
}

void RecordingRoutes::Offer(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Live& l = *it->second;
  if (!l.mirror || !l.mirror->ready()) return;
  l.last_offer = std::chrono::steady_clock::now();
  auto st = l.recorder->stats();
  if (!st.last_error.empty()) {
    Fail(id, "the recorder: " + st.last_error);
    return;
  }
  const auto& fb = l.mirror->framebuffer();
  // Dated when the screen looked like this: its last update (a paced frame is offered later).
  int64_t at = l.last_update_ms ? l.last_update_ms : ctx_.clock.NowMs();
  if (!l.recorder->Offer(recorder::ScreenFrame{.width = fb.width, .height = fb.height, .bgrx = fb.bgrx,
                                               .time_ms = at})) {
    // Dropped (the encoder is behind): offer the screen again once an interval has passed, so a
    // change followed by a still screen is not lost from the video.
    Pace(id);
  }
}

void RecordingRoutes::OnSegment(const std::string& id, const recorder::FinishedSegment& s) {
  auto& rec = RecordingOf(id);
  recorder::v1::Recording r;
  r.set_phase("segment");
  r.set_index(s.index);
  r.set_file(recorder::SegmentFile(s.index));
  r.set_start_unix_ms(s.start_ms);
  r.set_end_unix_ms(s.end_ms);
  r.set_bytes(s.bytes);
  r.set_sha256(s.sha256);
  r.set_width(s.width);
  r.set_height(s.height);
  r.set_frames(s.frames);
  r.set_truncated(s.truncated);
  if (s.truncated) r.set_detail("cut back to its last whole fragment after a write failed");
  auto it = live_.find(id);
  r.set_dropped_frames(rec.dropped + (it != live_.end() ? it->second->recorder->stats().dropped : 0));
  Emit(id, std::move(r));
  if (it != live_.end() && it->second->open_index == s.index) it->second->open_index.reset();
  ++totals_.segments;
  totals_.bytes += s.bytes;
  if (s.index < rec.index.deleted_below()) {
    // Deleted while it was being written.
    asio::co_spawn(ctx_.executor, [this, id, below = rec.index.deleted_below()]() -> asio::awaitable<void> {
      co_await RemoveBelow(id, below);
    }, asio::detached);
    return;
  }
  if (it == live_.end()) return;
  uint64_t bytes = 0;
  for (const auto& seg : rec.index.Segments()) bytes += seg.bytes;
  if (bytes >= Mib(ctx_.config.recording_max_mib)) {
    Fail(id, fmt::format("the recording reached its limit of {} MiB", ctx_.config.recording_max_mib));
    return;
  }
  if (totals_.bytes > Mib(ctx_.config.recording_quota_mib))
    asio::co_spawn(ctx_.executor, Sweep(), asio::detached);
}

asio::awaitable<uint64_t> RecordingRoutes::RemoveBelow(const std::string& id, uint32_t below) {
  std::string dir = DirOf(id);
  auto remove = [dir, below] {
    uint64_t n = 0;
    std::error_code ec;
    std::vector<fs::path> doomed;
    for (const auto& f : fs::directory_iterator(dir, ec)) {
      auto idx = recorder::ParseSegmentFile(f.path().filename().string());
      if (idx && *idx < below) doomed.push_back(f.path());
    }
    for (const auto& p : doomed) {
      std::error_code sec;
      auto size = fs::file_size(p, sec);
      if (fs::remove(p, sec)) n += sec ? 0 : size;
    }
    if (fs::is_empty(dir, ec) && !ec) fs::remove(dir, ec);
    return n;
  };
  auto alive = alive_;
  uint64_t freed = co_await OnPool(remove);
  if (!*alive) co_return freed;
  totals_.bytes -= std::min(totals_.bytes, freed);
  co_return freed;
}

void RecordingRoutes::Start() {
  asio::co_spawn(ctx_.executor, SweepLoop(), asio::detached);
}

asio::awaitable<void> RecordingRoutes::SweepLoop() {
  auto alive = alive_;
  while (*alive && !stopping_) {
    co_await Sweep();
    if (!*alive) co_return;
    sweep_timer_.expires_after(kSweepEvery);
    boost::system::error_code ec;
    co_await sweep_timer_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (ec) co_return;
  }
}

asio::awaitable<void> RecordingRoutes::Sweep() {
  auto alive = alive_;
  const auto& cfg = ctx_.config;
  std::string root = cfg.recording_dir;
  auto measure = [root] {
    std::map<std::string, uint64_t> u;
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(root, ec))
      if (d.is_directory()) u[d.path().filename().string()] = Usage(d.path().string()).bytes;
    return u;
  };
  auto usage = co_await OnPool(measure);
  if (!*alive) co_return;
  std::vector<recorder::RecordingUsage> entries;
  for (const auto& [id, bytes] : usage) {
    const SandboxRecord* r = ctx_.sandboxes.Find(id);
    if (!r) continue;  // not a sandbox of this daemon's: left alone
    entries.push_back({id, bytes, Ended(r->state), r->stopped_at_ms});
  }
  uint64_t quota = Mib(cfg.recording_quota_mib);
  auto plan = recorder::PlanRetention(std::move(entries), ctx_.clock.NowMs(),
                                      {.retention_days = cfg.recording_retention_days, .quota_bytes = quota});
  for (const auto& removal : plan.remove) {
    if (!*alive) co_return;
    co_await RemoveAll(removal.id, removal.why);
  }
  uint64_t total = plan.bytes_after;
  if (!*alive) co_return;
  totals_.bytes = total;
  over_quota_ = plan.over_quota;
  if (over_quota_) {
    std::vector<std::string> ids;
    for (const auto& [id, l] : live_) ids.push_back(id);
    for (const auto& id : ids) Fail(id, fmt::format("the recordings quota ({} MiB) is used up", cfg.recording_quota_mib));
  }
}

asio::awaitable<void> RecordingRoutes::RemoveAll(const std::string& id, const std::string& why) {
  auto alive = alive_;
  co_await LoadIndex(id);
  if (!*alive) co_return;
  auto on_disk = [d = DirOf(id)] { return Usage(d).next_index; };
  uint32_t files_next = co_await OnPool(on_disk);
  if (!*alive) co_return;
  uint32_t below = std::max(RecordingOf(id).index.next_index(), files_next);
  recorder::v1::Recording r;
  r.set_phase("deleted");
  r.set_index(below);
  r.set_detail(why);
  Emit(id, std::move(r));
  co_await RemoveBelow(id, below);
  log::Info(kRecordingLog, "sandbox {}: recording removed: {}", id, why);
}

asio::awaitable<void> RecordingRoutes::Shutdown() {
  stopping_ = true;
  sweep_timer_.cancel();
  std::vector<std::string> ids;
  for (const auto& [id, l] : live_) ids.push_back(id);
  int64_t now = ctx_.clock.NowMs();
  for (const auto& id : ids) StopRecorder(id, now);
  // The pool runs in order: once this runs, every recorder has finished, and the events they
  // posted are queued on the io_context ahead of this coroutine's resumption.
  auto nothing = [] { return 0; };
  co_await OnPool(nothing);
  co_await asio::post(ctx_.executor, asio::use_awaitable);
}

// --- routes ---------------------------------------------------------------------------------

asio::awaitable<std::optional<HttpResponse>> RecordingRoutes::Prepare(const std::string& id) {
  auto alive = alive_;
  if (auto r = ctx_.sandboxes.Get(id); !r) co_return r.error();
  co_await LoadIndex(id);
  if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  co_return std::nullopt;
}

Reply RecordingRoutes::GetRecording(Call& c) {
  auto alive = alive_;
  if (auto refused = co_await Prepare(c.id)) co_return *refused;
  auto r = ctx_.sandboxes.Get(c.id);
  if (!r) co_return r.error();
  const SandboxRecord& rec = **r;
  auto& recording = RecordingOf(c.id);
  auto it = live_.find(c.id);
  std::string status;
  if (!rec.recording)
    status = "disabled";
  else if (!recording.problem.empty())
    status = "failed";
  else if (rec.state == SandboxState::kRunning)
    status = "recording";
  else if (rec.state == SandboxState::kPaused)
    status = "paused";
  else
    status = "stopped";
  std::string base = "/v1/sandboxes/" + c.id;
  json segments = json::array();
  int64_t offset = 0;
  uint64_t bytes = 0;
  auto entry = [&](uint32_t index, int64_t start, int64_t end, uint64_t size, const std::string& sha,
                   uint32_t w, uint32_t h, bool truncated, bool live) {
    segments.push_back({{"index", index},
                        {"file", recorder::SegmentFile(index)},
                        {"start", Rfc3339(start)},
                        {"start_ms", start},
                        {"end", Rfc3339(end)},
                        {"end_ms", end},
                        {"video_offset_ms", offset},
                        {"bytes", size},
                        {"sha256", sha},
                        {"width", w},
                        {"height", h},
                        {"truncated", truncated},
                        {"live", live},
                        {"url", base + "/recording/segments/" + recorder::SegmentFile(index)}});
    offset += std::max<int64_t>(0, end - start);
    bytes += size;
  };
  for (const auto& s : recording.index.Segments())
    entry(s.index, s.start_ms, s.end_ms, s.bytes, s.sha256, s.width, s.height, s.truncated, false);
  if (it != live_.end() && it->second->open_index) {
    uint32_t index = *it->second->open_index;
    struct stat st {};
    uint64_t size = ::stat((DirOf(c.id) + "/" + recorder::SegmentFile(index)).c_str(), &st) == 0 ? st.st_size : 0;
    uint32_t w = 0, h = 0;
    if (it->second->mirror && it->second->mirror->ready()) {
      w = it->second->mirror->framebuffer().width & ~1u;
      h = it->second->mirror->framebuffer().height & ~1u;
    }
    entry(index, recording.index.StartOf(index), ctx_.clock.NowMs(), size, "", w, h, false, true);
  }
  uint64_t dropped = recording.dropped + (it != live_.end() ? it->second->recorder->stats().dropped : 0);
  co_return Json(200, {{"sandbox_id", c.id},
                       {"enabled", rec.recording},
                       {"status", status},
                       {"problem", recording.problem},
                       {"bytes", bytes},
                       {"duration_ms", offset},
                       {"dropped_frames", dropped},
                       {"url", base + "/recording.mp4"},
                       {"segments", segments}});
}

namespace {

// A body of `size` bytes read by `read(offset, buffer)` on `pool`, answered whole or as the one
// range the request asks for, with an ETag.
struct ServedBody {
  uint64_t size = 0;
  std::string etag;
  std::function<std::expected<size_t, std::string>(uint64_t, std::span<char>)> read;
};

HttpResponse Serve(Call& c, ServedBody body, asio::thread_pool& pool, asio::any_io_executor ex,
                   std::shared_ptr<bool> alive) {
  if (auto inm = c.ex.header("If-None-Match"); !inm.empty() && inm == body.etag) {
    HttpResponse r;
    r.status = 304;
    r.headers.emplace_back("ETag", body.etag);
    return r;
  }
  std::optional<ByteRange> range;
  if (auto h = c.ex.header("Range"); !h.empty()) {
    // A range of an older version of the body (If-Range with another ETag): the whole body.
    auto if_range = c.ex.header("If-Range");
    if (if_range.empty() || if_range == body.etag) {
      auto r = ParseRange(h, body.size);
      if (!r) return r.error();
      range = *r;
    }
  }
  HttpResponse res;
  res.content_type = "video/mp4";
  res.headers.emplace_back("Accept-Ranges", "bytes");
  res.headers.emplace_back("ETag", body.etag);
  uint64_t first = 0, count = body.size;
  if (range) {
    res.status = 206;
    first = range->first;
    count = range->last - range->first + 1;
    res.headers.emplace_back("Content-Range", fmt::format("bytes {}-{}/{}", range->first, range->last, body.size));
  }
  res.length = count;
  auto read = std::make_shared<decltype(body.read)>(std::move(body.read));
  res.stream = [read, first, count, &pool, ex, alive](ChunkWriter& w) -> asio::awaitable<void> {
    std::vector<char> buf(kReadPiece);
    uint64_t done = 0;
    while (done < count) {
      size_t want = static_cast<size_t>(std::min<uint64_t>(buf.size(), count - done));
      co_await asio::post(pool, asio::bind_executor(pool, asio::use_awaitable));
      auto n = (*read)(first + done, std::span<char>(buf.data(), want));
      co_await asio::post(ex, asio::use_awaitable);
      if (!*alive || !n || *n == 0) {
        if (!n) log::Warn(kRecordingLog, "{}", n.error());
        w.Abort();
        co_return;
      }
      if (!(co_await w.Write(std::string_view(buf.data(), *n)))) co_return;
      done += *n;
    }
  };
  return res;
}

}  // namespace

Reply RecordingRoutes::GetJoined(Call& c) {
  auto alive = alive_;
  if (auto refused = co_await Prepare(c.id)) co_return *refused;
  std::string dir = DirOf(c.id);
  std::vector<recorder::JoinInput> inputs;
  for (const auto& s : RecordingOf(c.id).index.Segments())
    inputs.push_back({dir + "/" + recorder::SegmentFile(s.index), s.bytes});
  std::optional<std::string> live_path;
  if (auto it = live_.find(c.id); it != live_.end() && it->second->open_index)
    live_path = dir + "/" + recorder::SegmentFile(*it->second->open_index);
  struct Planned {
    std::vector<recorder::JoinInput> inputs;
    std::expected<recorder::JoinedMp4, recorder::JoinError> plan;
    // Keeps the files open: a body being served reads them even once they are removed.
    std::unique_ptr<recorder::FileJoinReader> reader;
  };
  auto plan_join = [inputs = std::move(inputs), live_path]() mutable {
    // Files gone since they were listed (deleted meanwhile) are left out.
    std::erase_if(inputs, [](const recorder::JoinInput& in) {
      struct stat st {};
      return ::stat(in.path.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) < in.length;
    });
    if (live_path)
      if (uint64_t whole = WholeLength(*live_path); whole > 0) inputs.push_back({*live_path, whole});
    Planned p{inputs, std::unexpected(recorder::JoinError{"no segments"}),
              std::make_unique<recorder::FileJoinReader>(inputs)};
    if (!inputs.empty()) p.plan = recorder::PlanJoin(p.inputs, *p.reader);
    return p;
  };
  auto planned = co_await OnPool(plan_join);
  if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  if (planned.inputs.empty())
    co_return Error(404, "not_found", fmt::format("sandbox {} has no recorded video", c.id));
  if (!planned.plan)
    co_return Error(500, "internal", "joining the recording: " + planned.plan.error().message);
  if (planned.plan->joined_inputs < planned.inputs.size())
    log::Warn(kRecordingLog, "sandbox {}: recording.mp4 ends after {} of {} segments: {}", c.id,
              planned.plan->joined_inputs, planned.inputs.size(), planned.plan->stopped_because);
  std::string tag;
  for (const auto& in : planned.inputs) tag += fmt::format("{}:{};", in.path, in.length);
  auto digest = Sha256(tag);
  auto shared = std::make_shared<Planned>(std::move(planned));
  ServedBody body{.size = shared->plan->size,
                  .etag = QuoteEtag(ToHex(digest)),
                  .read = [shared](uint64_t off, std::span<char> out) -> std::expected<size_t, std::string> {
                    auto n = recorder::ReadJoined(*shared->plan, *shared->reader, off, out);
                    if (!n) return std::unexpected(n.error().message);
                    return *n;
                  }};
  co_return Serve(c, std::move(body), pool_, ctx_.executor, alive_);
}

Reply RecordingRoutes::GetSegment(Call& c) {
  auto alive = alive_;
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  auto index = recorder::ParseSegmentFile(c.target);
  if (!index)
    co_return Error(404, "not_found",
                    fmt::format("'{}' is not a segment name (NNNNNN.mp4, 6 digits)", c.target));
  co_await LoadIndex(c.id);
  if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  auto& rec = RecordingOf(c.id);
  std::string path = DirOf(c.id) + "/" + recorder::SegmentFile(*index);
  std::optional<recorder::SegmentEntry> listed;
  for (const auto& s : rec.index.Segments())
    if (s.index == *index) listed = s;
  auto it = live_.find(c.id);
  bool live = !listed && it != live_.end() && it->second->open_index == *index;
  if (!listed && !live)
    co_return Error(404, "not_found",
                    fmt::format("sandbox {} has no segment {}", c.id, recorder::SegmentFile(*index)));
  uint64_t size = 0;
  if (listed) {
    size = listed->bytes;
  } else {
    auto whole = [path] { return WholeLength(path); };
    size = co_await OnPool(whole);
    if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  }
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) < size || size == 0)
    co_return Error(404, "not_found",
                    fmt::format("sandbox {}: segment {} is not on disk", c.id, recorder::SegmentFile(*index)));
  std::string etag = listed ? QuoteEtag(listed->sha256) : QuoteEtag(ToHex(Sha256(fmt::format("{}:{}", path, size))));
  auto fd = std::make_shared<UniqueFd>(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!*fd) co_return Error(500, "internal", fmt::format("{}: {}", path, ErrnoString(errno)));
  ServedBody body{.size = size, .etag = etag, .read = [fd, path](uint64_t off, std::span<char> out) -> std::expected<size_t, std::string> {
                    ssize_t n = ::pread(fd->get(), out.data(), out.size(), static_cast<off_t>(off));
                    if (n < 0) return std::unexpected(fmt::format("{}: {}", path, ErrnoString(errno)));
                    return static_cast<size_t>(n);
                  }};
  co_return Serve(c, std::move(body), pool_, ctx_.executor, alive_);
}

Reply RecordingRoutes::DeleteRecording(Call& c) {
  auto alive = alive_;
  if (auto refused = co_await Prepare(c.id)) co_return *refused;
  auto& rec = RecordingOf(c.id);
  uint32_t below = rec.index.next_index();
  bool was_live = live_.contains(c.id);
  if (auto it = live_.find(c.id); it != live_.end())
    below = std::max(below, it->second->recorder->next_index());
  StopRecorder(c.id, ctx_.clock.NowMs());
  auto on_disk = [d = DirOf(c.id)] { return Usage(d).next_index; };
  uint32_t files_next = co_await OnPool(on_disk);
  if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  below = std::max(below, files_next);
  recorder::v1::Recording e;
  e.set_phase("deleted");
  e.set_index(below);
  e.set_detail("api");
  auto event = c.NewEvent(c.id);
  *event.mutable_recording() = e;
  rec.index.Apply(e);
  if (rec.loading) rec.emitted_while_loading.push_back(e);
  ctx_.events.Emit(std::move(event));
  co_await RemoveBelow(c.id, below);
  if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  const SandboxRecord* now = ctx_.sandboxes.Find(c.id);
  if (was_live && now && now->state == SandboxState::kRunning && now->recording && !stopping_)
    asio::co_spawn(ctx_.executor, StartRecorder(c.id), asio::detached);
  co_return NoContent();
}

Reply RecordingRoutes::GetHead(Call& c) {
  auto alive = alive_;
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  std::string path = ctx_.events.LogPath(c.id);
  auto& events = ctx_.events;
  auto verify_log = [&events, path] {
    events.Flush();
    return recorder::VerifyLog(path);
  };
  auto v = co_await OnPool(verify_log);
  if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  if (!v) {
    if (v.error().code == recorder::EventLogError::Code::kNotFound)
      co_return Json(200, {{"seq", 0}, {"head", ""}});
    co_return Error(500, "event_log_broken", v.error().message);
  }
  co_return Json(200, {{"seq", v->last_seq}, {"head", ToHex(v->head)}});
}

Reply RecordingRoutes::Verify(Call& c) {
  auto alive = alive_;
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  std::optional<uint32_t> live;
  if (auto it = live_.find(c.id); it != live_.end()) {
    // From the recorder itself: its newest file can exist before the executor has heard of it
    // (on_open is posted), and a route-side index would then call that file unlisted.
    live = it->second->recorder->opened_index();
    // A segment opens with its first frame, a moment after the recorder starts.
    if (!live) live = it->second->recorder->next_index();
  }
  std::string path = ctx_.events.LogPath(c.id), dir = DirOf(c.id);
  auto& events = ctx_.events;
  auto check_files = [&events, path, dir, live] {
    events.Flush();
    return recorder::CheckRecording(path, dir, live);
  };
  auto check = co_await OnPool(check_files);
  if (!*alive) co_return Error(503, "unavailable", "deskboxd is stopping");
  json problems = json::array();
  for (const auto& p : check.problems) {
    json j = {{"kind", p.kind}, {"message", p.message}};
    if (!p.file.empty()) {
      j["index"] = p.index;
      j["file"] = p.file;
    }
    problems.push_back(std::move(j));
  }
  co_return Json(200, {{"ok", check.ok},
                       {"head", check.head},
                       {"events", check.events},
                       {"segments_checked", check.segments_checked},
                       {"problems", problems}});
}

Reply RecordingRoutes::ReplayPage(Call& c) {
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  HttpResponse r;
  r.content_type = "text/html; charset=utf-8";
  r.body = kReplayPage;
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' "
                         "'unsafe-inline'; media-src 'self' blob:; img-src 'self' data:; "
                         "frame-ancestors 'none'");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  co_return r;
}

}  // namespace deskbox::api
