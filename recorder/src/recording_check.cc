#include "recorder/recording_check.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "common/files.h"
#include "common/sha256.h"
#include "recorder/event_log.h"

namespace deskbox::recorder {

std::string SegmentFile(uint32_t index) { return fmt::format("{:06}.mp4", index); }

std::optional<uint32_t> ParseSegmentFile(std::string_view name) {
  if (name.size() != 10 || name.substr(6) != ".mp4") return std::nullopt;
  uint32_t n = 0;
  for (char c : name.substr(0, 6)) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + static_cast<uint32_t>(c - '0');
  }
  return n;
}

void RecordingIndex::Apply(const v1::Recording& r, uint64_t seq) {
  const std::string& phase = r.phase();
  if (phase == "segment") {
    SegmentEntry e{.index = r.index(),
                   .start_ms = r.start_unix_ms(),
                   .end_ms = r.end_unix_ms(),
                   .bytes = r.bytes(),
                   .sha256 = r.sha256(),
                   .width = r.width(),
                   .height = r.height(),
                   .frames = r.frames(),
                   .truncated = r.truncated(),
                   .seq = seq};
    auto& slot = finished_[r.index()];
    // The same event seen twice (live, then from the file) keeps the log's seq.
    if (e.seq == 0) e.seq = slot.seq;
    slot = std::move(e);
    next_index_ = std::max(next_index_, r.index() + 1);
  } else if (phase == "started") {
    started_[r.index()] = r.start_unix_ms();
    next_index_ = std::max(next_index_, r.index() + 1);
  } else if (phase == "deleted") {
    deleted_below_ = std::max(deleted_below_, r.index());
    next_index_ = std::max(next_index_, r.index());
  }
}

std::vector<SegmentEntry> RecordingIndex::Segments() const {
  std::vector<SegmentEntry> out;
  for (auto it = finished_.lower_bound(deleted_below_); it != finished_.end(); ++it) out.push_back(it->second);
  return out;
}

int64_t RecordingIndex::StartOf(uint32_t index) const {
  auto it = started_.find(index);
  return it == started_.end() ? 0 : it->second;
}

namespace {

// Reads the log's recording events into `index`; the number of events and the head on success.
struct LogRead {
  uint64_t events = 0;
  std::string head;
  std::optional<std::string> error;
};
LogRead ReadInto(const std::string& log_path, RecordingIndex& index) {
  LogRead out;
  auto reader = EventLogReader::Open(log_path, {});
  if (!reader) {
    if (reader.error().code != EventLogError::Code::kNotFound) out.error = reader.error().message;
    return out;
  }
  for (;;) {
    auto e = (*reader)->Next();
    if (!e) {
      out.error = e.error().message;
      break;
    }
    if (!*e) break;
    ++out.events;
    if ((*e)->has_recording()) index.Apply((*e)->recording(), (*e)->seq());
  }
  out.head = ToHex((*reader)->head());
  return out;
}

}  // namespace

RecordingIndex ReadRecordingIndex(const std::string& log_path, std::string* error) {
  RecordingIndex index;
  auto r = ReadInto(log_path, index);
  if (error) *error = r.error.value_or("");
  return index;
}

RecordingCheck CheckRecording(const std::string& log_path, const std::string& dir,
                              std::optional<uint32_t> live_index) {
  RecordingCheck out;
  RecordingIndex index;
  auto read = ReadInto(log_path, index);
  out.events = read.events;
  out.head = read.head;
  if (read.error) out.problems.push_back({.kind = "log_broken", .message = *read.error});
  for (const auto& s : index.Segments()) {
    std::string file = SegmentFile(s.index);
    std::string path = dir + "/" + file;
    ++out.segments_checked;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      out.problems.push_back({"segment_missing", s.index, file,
                              fmt::format("{}: listed by the event log (seq {}) but {}", file, s.seq,
                                          errno == ENOENT ? "missing" : ErrnoString(errno))});
      continue;
    }
    if (static_cast<uint64_t>(st.st_size) != s.bytes) {
      out.problems.push_back({"segment_modified", s.index, file,
                              fmt::format("{}: {} bytes where the event log (seq {}) says {}", file,
                                          st.st_size, s.seq, s.bytes)});
      continue;
    }
    auto digest = Sha256File(path);
    if (!digest) {
      out.problems.push_back({"segment_missing", s.index, file, fmt::format("{}: {}", file, ErrnoString(digest.error()))});
      continue;
    }
    if (ToHex(*digest) != s.sha256)
      out.problems.push_back({"segment_modified", s.index, file,
                              fmt::format("{}: SHA-256 is {} where the event log (seq {}) says {}", file,
                                          ToHex(*digest), s.seq, s.sha256)});
  }
  // Files no event lists: planted, or left by a writer that died before its event (a restart
  // repairs and lists those).
  std::error_code ec;
  std::vector<uint32_t> unlisted;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    auto n = ParseSegmentFile(f.path().filename().string());
    if (!n || *n < index.deleted_below() || index.Listed(*n) || (live_index && *n == *live_index)) continue;
    unlisted.push_back(*n);
  }
  std::sort(unlisted.begin(), unlisted.end());
  for (uint32_t n : unlisted)
    out.problems.push_back({"segment_unlisted", n, SegmentFile(n),
                            fmt::format("{}: no event in the log lists this file", SegmentFile(n))});
  out.ok = out.problems.empty();
  return out;
}

RetentionPlan PlanRetention(std::vector<RecordingUsage> usage, int64_t now_ms, const RetentionRules& rules) {
  RetentionPlan plan;
  for (const auto& u : usage) plan.bytes_after += u.bytes;
  std::vector<const RecordingUsage*> ended;
  for (const auto& u : usage) {
    if (!u.ended || u.bytes == 0) continue;
    if (rules.retention_days > 0 && u.stopped_at_ms > 0 &&
        now_ms - u.stopped_at_ms > int64_t{rules.retention_days} * 86'400'000) {
      plan.remove.push_back({u.id, fmt::format("retention: the sandbox ended over {} days ago", rules.retention_days)});
      plan.bytes_after -= u.bytes;
      continue;
    }
    ended.push_back(&u);
  }
  std::stable_sort(ended.begin(), ended.end(),
                   [](const RecordingUsage* a, const RecordingUsage* b) { return a->stopped_at_ms < b->stopped_at_ms; });
  for (const RecordingUsage* u : ended) {
    if (plan.bytes_after <= rules.quota_bytes) break;
    plan.remove.push_back({u->id, fmt::format("quota: all recordings exceeded {} MiB", rules.quota_bytes >> 20)});
    plan.bytes_after -= u->bytes;
  }
  plan.over_quota = plan.bytes_after > rules.quota_bytes;
  return plan;
}

}  // namespace deskbox::recorder
