#pragma once
// What a sandbox's event log says about its screen recording, and whether the segment files on
// disk still match it (docs/recording.md).
//
//   RecordingIndex  the segments a log lists, built from its `recording` events in any order and
//                   any number of times (Apply is idempotent), so events seen live and the same
//                   events read back from the file can be merged.
//   CheckRecording  reads the whole log (verifying its chain) and checks every finished segment
//                   that no deletion covers against its event: size and SHA-256.
//
// Blocking file I/O: not on the io_context's thread.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "recorder/event.pb.h"

namespace deskbox::recorder {

struct SegmentEntry {
  uint32_t index = 0;
  int64_t start_ms = 0, end_ms = 0;
  uint64_t bytes = 0;
  std::string sha256;
  uint32_t width = 0, height = 0;
  uint64_t frames = 0;
  bool truncated = false;
  uint64_t seq = 0;  // the event that lists it (0: not read from the log)
};

// "000003.mp4" for 3; ParseSegmentFile is its inverse (nullopt for any other name: a name that
// reaches a file is never a path).
std::string SegmentFile(uint32_t index);
std::optional<uint32_t> ParseSegmentFile(std::string_view name);

class RecordingIndex {
 public:
  void Apply(const v1::Recording& r, uint64_t seq = 0);
  // Finished segments no deletion covers, by index.
  std::vector<SegmentEntry> Segments() const;
  // The start time of segment `index` as its "started" event gave it (0: unknown).
  int64_t StartOf(uint32_t index) const;
  // Every segment below this index was deleted.
  uint32_t deleted_below() const { return deleted_below_; }
  // The first index no event has used yet.
  uint32_t next_index() const { return next_index_; }
  bool Listed(uint32_t index) const { return finished_.contains(index); }

 private:
  std::map<uint32_t, SegmentEntry> finished_;
  std::map<uint32_t, int64_t> started_;
  uint32_t deleted_below_ = 0;
  uint32_t next_index_ = 0;
};

// The index of the log at `log_path` (no log: empty), read up to its first problem; `error` gets
// the problem, if any.
RecordingIndex ReadRecordingIndex(const std::string& log_path, std::string* error = nullptr);

struct RecordingProblem {
  std::string kind;  // log_broken, segment_modified, segment_missing, segment_unlisted
  uint32_t index = 0;
  std::string file;
  std::string message;
};

struct RecordingCheck {
  bool ok = true;
  std::string head;  // hex of the last verified record's hash
  uint64_t events = 0;
  uint64_t segments_checked = 0;
  std::vector<RecordingProblem> problems;
};

// The log at `log_path` and the segment files in `dir`. `live_index`: the segment being written
// (no event lists it yet; neither checked nor unlisted).
RecordingCheck CheckRecording(const std::string& log_path, const std::string& dir,
                              std::optional<uint32_t> live_index);

// Retention and the quota (docs/recording.md): which recordings a sweep removes, and whether
// recording must stop. Pure; deskboxd gathers the sizes and does the removing.
struct RecordingUsage {
  std::string id;
  uint64_t bytes = 0;
  bool ended = false;         // the sandbox is stopped or failed (deleted)
  int64_t stopped_at_ms = 0;  // when it ended (Unix ms)
};
struct RetentionRules {
  uint32_t retention_days = 30;  // 0: no age limit
  uint64_t quota_bytes = 0;      // all recordings together
};
struct RetentionPlan {
  struct Removal {
    std::string id;
    std::string why;
  };
  std::vector<Removal> remove;  // in this order
  uint64_t bytes_after = 0;
  bool over_quota = false;      // still over after the removals: recording must stop
};
// Ended sandboxes' recordings older than the retention go first; then, while over the quota,
// the other ended ones, the longest ended first. Live sandboxes' recordings are never removed.
RetentionPlan PlanRetention(std::vector<RecordingUsage> usage, int64_t now_ms, const RetentionRules& rules);

}  // namespace deskbox::recorder
