#pragma once
// ScreenRecorder: one sandbox's screen, recorded as a run of segments (SegmentEncoder) in a
// directory of its own, NNNNNN.mp4 from `first_index` on. Frames are offered from any thread
// (the screen mirror's io thread) and encoded on the recorder's own thread, so encoding never
// delays the mirror, screenshots or input: frames wait in a bounded queue, and when it is full
// the new frame is dropped and counted.
//
// A segment ends, and the next begins with the next frame, when it has lasted
// `segment_max` (a still screen's too: the next then starts with the same screen), when the
// screen changes size, and on Cut() (a pause: the gap is not recorded). Each finished segment is reported with its SHA-256, size and time range, for the
// event log to chain it. While no frame comes, the last one is coded again as a keyframe every
// `keyframe_every` (SegmentEncoder::KeepAlive), so the segment on disk stays at most that far
// behind the screen.
//
// RepairSegments, for a restart after a crash: a segment that was being written is cut back to
// its last whole fragment (ScanFragments) and reported as truncated.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <expected>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "recorder/segment_encoder.h"

namespace deskbox::recorder {

struct RecorderSettings {
  std::string dir;  // exists; one sandbox's segments
  EncoderSettings encoder;
  std::chrono::milliseconds segment_max{60000};
  size_t queue_frames = 2;  // frames waiting for the encoder; a new one beyond is dropped
  // Wall-clock milliseconds (Unix time); injected for tests.
  std::function<int64_t()> now_ms;
  // Called on the recorder's thread when a segment file is opened, with its index and the time
  // of its first frame (for a segment a crash leaves unfinished: RepairSegments cannot tell).
  std::function<void(uint32_t index, int64_t start_ms)> on_open;
};

struct ScreenFrame {
  uint32_t width = 0, height = 0;
  std::vector<uint8_t> bgrx;  // width * height * 4
  int64_t time_ms = 0;        // Unix time the screen looked like this
};

struct FinishedSegment {
  uint32_t index = 0;
  std::string path;
  int64_t start_ms = 0, end_ms = 0;  // Unix time
  uint64_t bytes = 0;
  std::string sha256;  // hex
  uint32_t width = 0, height = 0;
  uint64_t frames = 0;
  bool truncated = false;  // cut back after a crash
};

struct RecorderStats {
  uint64_t offered = 0, encoded = 0, dropped = 0, segments = 0;
  std::string last_error;  // the last encoder or disk failure; recording resumes with the next segment
};

class ScreenRecorder {
 public:
  using OnSegment = std::function<void(const FinishedSegment&)>;  // called on the recorder's thread

  ScreenRecorder(RecorderSettings settings, OnSegment on_segment, uint32_t first_index);
  ~ScreenRecorder();  // Stop(now)
  ScreenRecorder(const ScreenRecorder&) = delete;
  ScreenRecorder& operator=(const ScreenRecorder&) = delete;

  // Never waits for encoding. False when the queue is full or the recorder stopped (dropped).
  bool Offer(ScreenFrame frame);
  // Ends the current segment at `end_ms` once the frames before are coded.
  void Cut(int64_t end_ms);
  // Codes what is queued, finishes the segment at `end_ms` and ends the thread. Idempotent.
  void Stop(int64_t end_ms);
  RecorderStats stats() const;
  uint32_t next_index() const;
  // The segment opened last (its file may exist before its `on_open` has been heard of), or
  // nullopt before the first.
  std::optional<uint32_t> opened_index() const;

 private:
  struct Item {
    std::optional<ScreenFrame> frame;  // else a cut at cut_ms
    int64_t cut_ms = 0;
  };
  void Loop();
  void Encode(ScreenFrame& f);
  void Finish(int64_t end_ms);
  void Failed(const std::string& what);
  // Counts current_ as a finished segment and hands it to on_segment_.
  void Report();

  RecorderSettings settings_;
  OnSegment on_segment_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  size_t queued_frames_ = 0;
  bool stopping_ = false;
  int64_t stop_ms_ = 0;
  RecorderStats stats_;
  uint32_t next_index_;
  std::optional<uint32_t> opened_index_;
  // The recorder thread's own.
  std::unique_ptr<SegmentEncoder> encoder_;
  FinishedSegment current_;
  std::optional<ScreenFrame> last_frame_;  // the last frame coded, to start the next segment with
  std::thread thread_;
};

// Every NNNNNN.mp4 in `dir` that its writer did not finish (it died: no mfra index at the end)
// is reported as truncated, cut back to its last
// whole fragment; a segment with no whole part is removed. Returns what was repaired, with
// `truncated` set (time ranges unknown here: 0).
std::expected<std::vector<FinishedSegment>, EncoderError> RepairSegments(const std::string& dir);

}  // namespace deskbox::recorder
