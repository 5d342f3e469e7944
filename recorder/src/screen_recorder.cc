#include "recorder/screen_recorder.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <regex>

#include "common/files.h"
#include "common/log.h"
#include "common/sha256.h"
#include "recorder/mp4_fragments.h"

namespace deskbox::recorder {

namespace {
constexpr char kRecorderLog[] = "recorder";
constexpr size_t kMaxSegmentBytes = size_t{4} << 30;  // a repair reads at most this much

std::string SegmentPath(const std::string& dir, uint32_t index) { return fmt::format("{}/{:06}.mp4", dir, index); }

// The file's bytes, scanned.
std::expected<std::expected<Mp4Layout, Mp4Error>, EncoderError> ReadAndScan(const std::string& path) {
  auto bytes = ReadFile(path, kMaxSegmentBytes);
  if (!bytes) return std::unexpected(EncoderError{fmt::format("{}: {}", path, ErrnoString(bytes.error()))});
  return ScanFragments(*bytes);
}

// Cuts `path`, whose scan is `layout`, back to its whole fragments: the layout, or nullopt when
// nothing of it plays (the file is removed then).
std::expected<std::optional<Mp4Layout>, EncoderError> CutToWhole(const std::string& path,
                                                                 const std::expected<Mp4Layout, Mp4Error>& layout) {
  if (!layout || layout->fragments == 0) {
    std::error_code ec;
    std::filesystem::remove(path, ec);
    return std::nullopt;
  }
  if (!layout->complete && ::truncate(path.c_str(), static_cast<off_t>(layout->whole_length)) != 0)
    return std::unexpected(EncoderError{fmt::format("{}: {}", path, ErrnoString(errno))});
  return std::optional<Mp4Layout>(*layout);
}
}  // namespace

ScreenRecorder::ScreenRecorder(RecorderSettings settings, OnSegment on_segment, uint32_t first_index)
    : settings_(std::move(settings)), on_segment_(std::move(on_segment)), next_index_(first_index) {
  if (!settings_.now_ms)
    settings_.now_ms = [] {
      return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
    };
  thread_ = std::thread([this] { Loop(); });
}

ScreenRecorder::~ScreenRecorder() { Stop(settings_.now_ms()); }

bool ScreenRecorder::Offer(ScreenFrame frame) {
  std::lock_guard lk(mu_);
  ++stats_.offered;
  if (stopping_ || queued_frames_ >= settings_.queue_frames ||
      frame.bgrx.size() != size_t{frame.width} * frame.height * 4) {
    ++stats_.dropped;
    return false;
  }
  queue_.push_back(Item{std::move(frame)});
  ++queued_frames_;
  cv_.notify_one();
  return true;
}

void ScreenRecorder::Cut(int64_t end_ms) {
  std::lock_guard lk(mu_);
  if (stopping_) return;
  queue_.push_back(Item{std::nullopt, end_ms});
  cv_.notify_one();
}

void ScreenRecorder::Stop(int64_t end_ms) {
  {
    std::lock_guard lk(mu_);
    if (!stopping_) {
      stopping_ = true;
      stop_ms_ = end_ms;
    }
    cv_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

RecorderStats ScreenRecorder::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

std::optional<uint32_t> ScreenRecorder::opened_index() const {
  std::lock_guard lk(mu_);
  return opened_index_;
}

uint32_t ScreenRecorder::next_index() const {
  std::lock_guard lk(mu_);
  return next_index_;
}

void ScreenRecorder::Loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) break;
      if (!encoder_) {
        cv_.wait(lk);
        continue;
      }
      // Wake for the next keep-alive frame too.
      cv_.wait_for(lk, settings_.encoder.keyframe_every / 4);
      if (queue_.empty() && !stopping_ && encoder_) {
        lk.unlock();
        int64_t now = settings_.now_ms();
        if (now - current_.start_ms >= settings_.segment_max.count() && last_frame_) {
          // A still screen's segment ends on time too; the next starts at once with the same
          // screen, so the recording has no hole.
          ScreenFrame again = std::move(*last_frame_);
          last_frame_.reset();
          again.time_ms = now;
          Finish(now);
          Encode(again);
        } else if (auto r = encoder_->KeepAlive(now - current_.start_ms); !r) {
          Failed(r.error().message);
        }
        lk.lock();
      }
      continue;
    }
    Item item = std::move(queue_.front());
    queue_.pop_front();
    if (item.frame) --queued_frames_;
    lk.unlock();
    if (item.frame)
      Encode(*item.frame);
    else
      Finish(item.cut_ms);
    lk.lock();
  }
  int64_t end = stop_ms_;
  lk.unlock();
  Finish(end);
}

void ScreenRecorder::Encode(ScreenFrame& f) {
  // H.264 wants even sides: an odd screen loses its last column or row.
  uint32_t w = f.width & ~1u, h = f.height & ~1u;
  if (encoder_ && (w != current_.width || h != current_.height ||
                   f.time_ms - current_.start_ms >= settings_.segment_max.count()))
    Finish(f.time_ms);
  if (!encoder_) {
    uint32_t index;
    {
      std::lock_guard lk(mu_);
      index = next_index_++;
      opened_index_ = index;
    }
    std::string path = SegmentPath(settings_.dir, index);
    auto enc = SegmentEncoder::Open(path, w, h, settings_.encoder);
    if (!enc) {
      Failed(enc.error().message);
      std::lock_guard lk(mu_);
      ++stats_.dropped;
      return;
    }
    encoder_ = std::move(*enc);
    current_ = FinishedSegment{.index = index, .path = path, .start_ms = f.time_ms, .width = w, .height = h};
    if (settings_.on_open) settings_.on_open(index, f.time_ms);
  }
  // Frame times come from the offering side; a keep-alive may have coded a later time already.
  int64_t pts = std::max(f.time_ms - current_.start_ms, encoder_->stats().last_pts_ms + 1);
  if (auto r = encoder_->AddFrame(f.bgrx.data(), size_t{f.width} * 4, pts); !r) {
    Failed(r.error().message);
    return;
  }
  last_frame_ = std::move(f);
  std::lock_guard lk(mu_);
  ++stats_.encoded;
}

void ScreenRecorder::Finish(int64_t end_ms) {
  if (!encoder_) return;
  int64_t end_pts = std::max(end_ms - current_.start_ms, encoder_->stats().last_pts_ms);
  auto st = encoder_->Finish(end_pts);
  encoder_.reset();
  if (!st) {
    Failed(st.error().message);
    return;
  }
  current_.end_ms = current_.start_ms + end_pts;
  current_.bytes = st->bytes;
  current_.frames = st->frames;
  auto digest = Sha256File(current_.path);
  if (!digest) {
    Failed(fmt::format("{}: {}", current_.path, ErrnoString(digest.error())));
    return;
  }
  current_.sha256 = ToHex(*digest);
  Report();
}

void ScreenRecorder::Report() {
  {
    std::lock_guard lk(mu_);
    ++stats_.segments;
  }
  if (on_segment_) on_segment_(current_);
}

void ScreenRecorder::Failed(const std::string& what) {
  log::Warn(kRecorderLog, "{}: {}", settings_.dir, what);
  {
    std::lock_guard lk(mu_);
    stats_.last_error = what;
  }
  if (!encoder_) return;
  // The segment ends where its last whole fragment does; the next frame starts another.
  int64_t last_pts = encoder_->stats().last_pts_ms;
  encoder_.reset();
  auto scanned = ReadAndScan(current_.path);
  if (!scanned) return;
  auto layout = CutToWhole(current_.path, *scanned);
  if (!layout || !*layout) return;
  current_.end_ms = current_.start_ms + std::max<int64_t>(last_pts, 0);
  current_.bytes = (*layout)->whole_length;
  current_.truncated = true;
  if (auto digest = Sha256File(current_.path)) current_.sha256 = ToHex(*digest);
  Report();
}

std::expected<std::vector<FinishedSegment>, EncoderError> RepairSegments(const std::string& dir) {
  std::vector<FinishedSegment> repaired;
  static const std::regex kName(R"((\d{6})\.mp4)");
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec))
    if (e.is_regular_file() && std::regex_match(e.path().filename().string(), kName)) files.push_back(e.path());
  if (ec) return std::unexpected(EncoderError{fmt::format("{}: {}", dir, ec.message())});
  std::sort(files.begin(), files.end());
  for (const auto& p : files) {
    auto scanned = ReadAndScan(p.string());
    if (!scanned) return std::unexpected(scanned.error());
    if (*scanned && (*scanned)->complete && (*scanned)->finished) continue;
    auto cut = CutToWhole(p.string(), *scanned);
    if (!cut) return std::unexpected(cut.error());
    if (!*cut) {
      log::Warn(kRecorderLog, "{}: nothing of it plays; removed", p.string());
      continue;
    }
    FinishedSegment s;
    s.index = static_cast<uint32_t>(std::stoul(p.filename().string().substr(0, 6)));
    s.path = p.string();
    s.bytes = (*cut)->whole_length;
    s.truncated = true;
    if (auto digest = Sha256File(s.path)) s.sha256 = ToHex(*digest);
    log::Info(kRecorderLog, "{}: cut back to its {} whole fragments ({} bytes)", s.path, (*cut)->fragments, s.bytes);
    repaired.push_back(std::move(s));
  }
  return repaired;
}

}  // namespace deskbox::recorder
