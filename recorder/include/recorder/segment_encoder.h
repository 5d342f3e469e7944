#pragma once
// SegmentEncoder: one segment of a sandbox's screen recording, a fragmented MP4 file of H.264,
// written with FFmpeg's libraries (libavcodec's libx264, libavformat's mp4 muxer) in-process.
//
//  - Variable frame rate: a frame is given with its own time (ms since the segment began);
//    nothing is encoded while the screen stands still.
//  - Keyframes by time, not by frame count: a new picture is coded as an IDR frame once
//    `keyframe_every` has passed since the last keyframe.
//  - Fragments at most `keyframe_every` long: each keyframe starts one, and while the screen
//    stands still KeepAlive() codes the last picture again, as a predicted frame of skipped
//    macroblocks (a few dozen bytes, not a keyframe), to start the next. A file cut off by a
//    crash therefore loses at most the fragment being written (ScanFragments, mp4_fragments.h),
//    and a still screen costs one keyframe per segment, not one per `keyframe_every`.
//  - Each finished fragment is flushed to the file at once.
//  - Frames are BGRX (the mirror's framebuffer) of the segment's fixed size; a new size is a new
//    segment.
//
// Blocking and CPU-bound: it runs on a thread of its own (never the io_context's). Not
// thread-safe: one thread uses one encoder.
#include <chrono>
#include <cstdint>
#include <expected>
#include <memory>
#include <string>

namespace deskbox::recorder {

struct EncoderSettings {
  std::string preset = "ultrafast";  // libx264: screen content at low CPU (docs/recording.md)
  int crf = 28;
  std::chrono::milliseconds keyframe_every{2000};
  int max_fps = 15;  // a rate hint for the rate control; callers pace the frames
};

struct EncoderError {
  std::string message;
};

struct SegmentStats {
  uint64_t frames = 0;     // frames coded (keep-alive frames included)
  uint64_t keyframes = 0;
  uint64_t bytes = 0;      // the file's size once finished
  int64_t last_pts_ms = -1;
};

class SegmentEncoder {
 public:
  // Creates `path` (it must not exist) and writes the MP4 header. width and height: even,
  // 16..8192.
  static std::expected<std::unique_ptr<SegmentEncoder>, EncoderError> Open(const std::string& path, uint32_t width,
                                                                           uint32_t height,
                                                                           const EncoderSettings& settings);
  ~SegmentEncoder();
  SegmentEncoder(const SegmentEncoder&) = delete;
  SegmentEncoder& operator=(const SegmentEncoder&) = delete;

  // One frame: width * height BGRX pixels, `stride` bytes a row; pts_ms after the last frame's.
  std::expected<void, EncoderError> AddFrame(const uint8_t* bgrx, size_t stride, int64_t pts_ms);
  // At `now_ms`: codes the last frame again (a predicted frame) if the current fragment began
  // `keyframe_every` or more ago, so that a still screen still ends its fragments. Nothing
  // before a first frame.
  std::expected<void, EncoderError> KeepAlive(int64_t now_ms);
  // Drains the encoder and writes the trailer; the file is then complete. `end_ms`: when the
  // segment ends (the last frame lasts until then).
  std::expected<SegmentStats, EncoderError> Finish(int64_t end_ms);

  const SegmentStats& stats() const { return stats_; }
  uint32_t width() const { return width_; }
  uint32_t height() const { return height_; }

 private:
  struct Av;
  SegmentEncoder(uint32_t width, uint32_t height, EncoderSettings settings);
  // duration_ms > 0: how long this frame lasts (else until the next one, as the muxer reckons).
  std::expected<void, EncoderError> Encode(int64_t pts_ms, bool keyframe, int64_t duration_ms = 0);
  // The last picture again, as a predicted frame that changes nothing.
  std::expected<void, EncoderError> Repeat(int64_t pts_ms, int64_t duration_ms = 0);
  // Writes what the encoder has made; a keyframe's packet puts the fragment before it on disk.
  std::expected<void, EncoderError> Drain(int64_t duration_ms = 0);

  uint32_t width_, height_;
  EncoderSettings settings_;
  std::unique_ptr<Av> av_;
  SegmentStats stats_;
  int64_t last_key_ms_ = -1;
  int64_t fragment_start_ms_ = -1;  // the first frame of the fragment being written
  bool finished_ = false;
};

}  // namespace deskbox::recorder
