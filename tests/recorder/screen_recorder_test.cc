// ScreenRecorder: segments that end on a size change, at segment_max and on Cut, each reported
// with the SHA-256 of its file; a full queue drops and counts; a still screen is kept alive with
// keyframes; RepairSegments cuts back what a crash left.
#include "recorder/screen_recorder.h"

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "common/sha256.h"
#include "recorder/mp4_fragments.h"

namespace deskbox::recorder {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

ScreenFrame Frame(uint32_t w, uint32_t h, int64_t t, uint8_t shade) {
  ScreenFrame f{w, h, std::vector<uint8_t>(size_t{w} * h * 4, shade), t};
  return f;
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

class ScreenRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("deskbox-screenrec-" + std::to_string(::getpid()) + "-" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  RecorderSettings Settings() {
    RecorderSettings s;
    s.dir = dir_;
    s.queue_frames = 1000;  // nothing dropped unless a test wants it
    s.now_ms = [this] { return now_.load(); };
    return s;
  }
  ScreenRecorder::OnSegment Collect() {
    return [this](const FinishedSegment& s) {
      std::lock_guard lk(mu_);
      segments_.push_back(s);
    };
  }
  std::string dir_;
  std::atomic<int64_t> now_{1'700'000'000'000};
  std::mutex mu_;
  std::vector<FinishedSegment> segments_;
};

TEST_F(ScreenRecorderTest, SegmentsEndAtTheirLongestOnASizeChangeAndOnACut) {
  auto s = Settings();
  s.segment_max = 3000ms;
  int64_t t0 = now_;
  {
    ScreenRecorder rec(s, Collect(), 7);
    for (int i = 0; i < 20; ++i) ASSERT_TRUE(rec.Offer(Frame(320, 200, t0 + i * 250, uint8_t(i * 10))));  // 0–4.75 s
    ASSERT_TRUE(rec.Offer(Frame(400, 240, t0 + 5000, 1)));  // the screen was resized
    ASSERT_TRUE(rec.Offer(Frame(400, 240, t0 + 5500, 2)));
    rec.Cut(t0 + 6000);                                     // paused
    ASSERT_TRUE(rec.Offer(Frame(400, 240, t0 + 9000, 3)));  // resumed
    rec.Stop(t0 + 10000);
    EXPECT_EQ(rec.stats().encoded, 23u);
    EXPECT_EQ(rec.stats().dropped, 0u);
    EXPECT_EQ(rec.next_index(), 11u);
  }
  std::lock_guard lk(mu_);
  ASSERT_EQ(segments_.size(), 4u);
  struct Want {
    uint32_t index;
    int64_t start, end;
    uint32_t width;
  };
  std::vector<Want> want = {{7, 0, 3000, 320}, {8, 3000, 5000, 320}, {9, 5000, 6000, 400}, {10, 9000, 10000, 400}};
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& g = segments_[i];
    EXPECT_EQ(g.index, want[i].index);
    EXPECT_EQ(g.start_ms - t0, want[i].start) << i;
    EXPECT_EQ(g.end_ms - t0, want[i].end) << i;
    EXPECT_EQ(g.width, want[i].width) << i;
    EXPECT_FALSE(g.truncated);
    EXPECT_EQ(g.path, fmt::format("{}/{:06}.mp4", dir_, g.index));
    EXPECT_EQ(g.bytes, fs::file_size(g.path));
    EXPECT_EQ(g.sha256, ToHex(Sha256(ReadAll(g.path))));
    auto layout = ScanFragments(ReadAll(g.path));
    ASSERT_TRUE(layout);
    EXPECT_TRUE(layout->complete);
  }
}

TEST_F(ScreenRecorderTest, AFullQueueDropsNewFramesAndCountsThem) {
  auto s = Settings();
  s.queue_frames = 2;
  ScreenRecorder rec(s, Collect(), 0);
  int accepted = 0;
  for (int i = 0; i < 40; ++i) accepted += rec.Offer(Frame(1280, 800, now_ + i * 10, uint8_t(i)));
  EXPECT_FALSE(rec.Offer(ScreenFrame{3, 3, {1}, 0})) << "a frame whose pixels do not fill it";
  rec.Stop(now_ + 1000);
  auto st = rec.stats();
  EXPECT_EQ(st.offered, 41u);
  EXPECT_EQ(st.encoded, uint64_t(accepted));
  EXPECT_EQ(st.dropped, 41u - accepted);
  EXPECT_GT(st.dropped, 0u) << "40 full frames at once outran a queue of 2";
  EXPECT_FALSE(rec.Offer(Frame(320, 200, now_ + 2000, 0))) << "stopped";
}

TEST_F(ScreenRecorderTest, AStillScreenStartsAFragmentEveryInterval) {
  auto s = Settings();
  s.encoder.keyframe_every = 200ms;
  ScreenRecorder rec(s, Collect(), 0);
  int64_t t0 = now_;
  ASSERT_TRUE(rec.Offer(Frame(320, 200, t0, 9)));
  // The clock runs 2 s while nothing is offered.
  for (int i = 1; i <= 40; ++i) {
    now_ = t0 + i * 50;
    std::this_thread::sleep_for(10ms);
  }
  rec.Stop(now_);
  std::lock_guard lk(mu_);
  ASSERT_EQ(segments_.size(), 1u);
  // The first frame, about one keep-alive frame per 200 ms of the 2 s, and the end.
  EXPECT_GE(segments_[0].frames, 6u);
  EXPECT_LE(segments_[0].frames, 12u);
  auto layout = ScanFragments(ReadAll(segments_[0].path));
  ASSERT_TRUE(layout);
  EXPECT_GE(layout->fragments, 5u);
}

TEST_F(ScreenRecorderTest, RepairCutsBackWhatACrashLeftAndRemovesWhatNeverPlayed) {
  // A finished segment, untouched by the repair.
  {
    ScreenRecorder rec(Settings(), Collect(), 1);
    ASSERT_TRUE(rec.Offer(Frame(320, 200, now_, 1)));
    rec.Stop(now_ + 1000);
  }
  std::string finished = dir_ + "/000001.mp4";
  std::string finished_bytes = ReadAll(finished);
  // A segment mid-write, as a kill -9 leaves it: three whole fragments and a partial one.
  std::string partial = dir_ + "/000002.mp4";
  {
    auto enc = SegmentEncoder::Open(dir_ + "/writing.mp4", 320, 200, {.keyframe_every = 500ms});
    ASSERT_TRUE(enc);
    for (int t = 0; t <= 1700; t += 100) {
      auto f = Frame(320, 200, t, uint8_t(t / 10));
      ASSERT_TRUE((*enc)->AddFrame(f.bgrx.data(), 320 * 4, t));
    }
    std::ofstream(partial, std::ios::binary) << ReadAll(dir_ + "/writing.mp4") << std::string(100, 'x');
    fs::remove(dir_ + "/writing.mp4");
  }
  std::ofstream(dir_ + "/000003.mp4", std::ios::binary) << "not a segment";
  std::ofstream(dir_ + "/notes.txt") << "left alone";
  auto repaired = RepairSegments(dir_);
  ASSERT_TRUE(repaired) << repaired.error().message;
  ASSERT_EQ(repaired->size(), 1u);
  const auto& r = (*repaired)[0];
  EXPECT_EQ(r.index, 2u);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.bytes, fs::file_size(partial));
  EXPECT_EQ(r.sha256, ToHex(Sha256(ReadAll(partial))));
  auto layout = ScanFragments(ReadAll(partial));
  ASSERT_TRUE(layout);
  EXPECT_TRUE(layout->complete);
  EXPECT_EQ(layout->fragments, 3u);
  EXPECT_EQ(ReadAll(finished), finished_bytes);
  EXPECT_FALSE(fs::exists(dir_ + "/000003.mp4"));
  EXPECT_TRUE(fs::exists(dir_ + "/notes.txt"));
  EXPECT_FALSE(layout->finished) << "no mfra: its writer never finished it";
  // Repairing again cuts nothing more: the same segment, the same bytes, reported again (the
  // caller logs a segment once, by index).
  std::string cut_bytes = ReadAll(partial);
  auto again = RepairSegments(dir_);
  ASSERT_TRUE(again);
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].index, 2u);
  EXPECT_EQ((*again)[0].sha256, r.sha256);
  EXPECT_EQ(ReadAll(partial), cut_bytes);
}

TEST_F(ScreenRecorderTest, ASegmentWhoseWriterDiedBetweenFragmentsIsReportedAsTruncated) {
  // kill -9 between two fragments: the file ends on a whole fragment, but no mfra follows.
  std::string path = dir_ + "/000004.mp4";
  {
    auto enc = SegmentEncoder::Open(dir_ + "/writing.mp4", 320, 200, {.keyframe_every = 500ms});
    ASSERT_TRUE(enc);
    for (int t = 0; t <= 1000; t += 100) {
      auto f = Frame(320, 200, t, uint8_t(t / 10));
      ASSERT_TRUE((*enc)->AddFrame(f.bgrx.data(), 320 * 4, t));
    }
    std::string bytes = ReadAll(dir_ + "/writing.mp4");
    auto layout = ScanFragments(bytes);
    ASSERT_TRUE(layout);
    std::ofstream(path, std::ios::binary) << bytes.substr(0, layout->whole_length);
    fs::remove(dir_ + "/writing.mp4");
  }
  std::string before = ReadAll(path);
  auto repaired = RepairSegments(dir_);
  ASSERT_TRUE(repaired) << repaired.error().message;
  ASSERT_EQ(repaired->size(), 1u);
  EXPECT_EQ((*repaired)[0].index, 4u);
  EXPECT_TRUE((*repaired)[0].truncated);
  EXPECT_EQ(ReadAll(path), before) << "nothing to cut";
}

}  // namespace
}  // namespace deskbox::recorder

namespace deskbox::recorder {
namespace {

// A full disk, as the recorder sees it: every write past a size fails (RLIMIT_FSIZE gives EFBIG
// the way a full file system gives ENOSPC). The segment being written ends at its last whole
// fragment, reported truncated with the hash of what is on disk; the error is kept for the
// caller; the segments finished before stay as they were.
TEST_F(ScreenRecorderTest, AWriteFailureEndsTheSegmentAtItsLastWholeFragment) {
  auto s = Settings();
  s.encoder.keyframe_every = 200ms;
  int64_t t0 = now_;
  std::string first_bytes;
  {
    ScreenRecorder rec(s, Collect(), 0);
    ASSERT_TRUE(rec.Offer(Frame(320, 200, t0, 10)));
    rec.Cut(t0 + 500);
    rec.Stop(t0 + 500);
  }
  first_bytes = ReadAll(dir_ + "/000000.mp4");
  ASSERT_FALSE(first_bytes.empty());

  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 48 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  RecorderStats stats;
  {
    ScreenRecorder rec(s, Collect(), 1);
    // A square of noise on a flat screen: each frame a keyframe of some KiB, so a few whole
    // fragments fit before the limit.
    for (int i = 0; i < 40; ++i) {
      ScreenFrame f = Frame(320, 200, t0 + 1000 + i * 250, 0);
      for (size_t y = 0; y < 64; ++y)
        for (size_t x = 0; x < 64 * 4; ++x)
          f.bgrx[y * 320 * 4 + x] = static_cast<uint8_t>(((y * 331 + x) * 2654435761u + i * 97) >> 9);
      rec.Offer(std::move(f));
      std::this_thread::sleep_for(5ms);
    }
    rec.Stop(t0 + 12000);
    stats = rec.stats();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_FALSE(stats.last_error.empty());
  EXPECT_EQ(ReadAll(dir_ + "/000000.mp4"), first_bytes) << "a finished segment is never touched";
  std::lock_guard lk(mu_);
  auto cut = std::find_if(segments_.begin(), segments_.end(), [](const FinishedSegment& f) { return f.truncated; });
  ASSERT_NE(cut, segments_.end()) << "the segment that hit the limit is reported";
  EXPECT_LE(cut->bytes, 48u * 1024);
  EXPECT_EQ(cut->bytes, fs::file_size(cut->path));
  EXPECT_EQ(cut->sha256, ToHex(Sha256(ReadAll(cut->path))));
  auto layout = ScanFragments(ReadAll(cut->path));
  ASSERT_TRUE(layout);
  EXPECT_TRUE(layout->complete) << "cut back to its whole fragments";
  EXPECT_GE(layout->fragments, 1u);
}

}  // namespace
}  // namespace deskbox::recorder
