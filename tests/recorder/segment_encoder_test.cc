// SegmentEncoder writing real H.264 fragmented MP4 files, read back by ffprobe: what a browser
// is given, keyframes by time, a still screen, and a file cut off as a crash leaves it.
#include "recorder/segment_encoder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "recorder/mp4_fragments.h"
#include "recorder_test_util.h"

namespace deskbox::recorder {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

constexpr uint32_t kW = 320, kH = 200;

// A screen with a white square at (x, 40) on grey.
std::vector<uint8_t> Screen(uint32_t x) {
  std::vector<uint8_t> px(size_t{kW} * kH * 4, 0x40);
  for (uint32_t y = 40; y < 80; ++y)
    for (uint32_t i = x; i < x + 40 && i < kW; ++i)
      for (int c = 0; c < 3; ++c) px[(size_t{y} * kW + i) * 4 + c] = 0xff;
  return px;
}

using testing::Shell;

// ffprobe's view of a file: its streams, its frames (key or not, times) and any error it printed.
struct Probe {
  json stream;
  std::vector<std::pair<bool, double>> frames;  // key frame, time in s
  double duration = 0;
  std::string errors;
};
Probe ProbeFile(const std::string& path) {
  Probe p;
  auto r = Shell(std::string(DESKBOX_FFPROBE) + " -v error -show_streams -show_format -show_frames -of json '" +
                 path + "' 2>" + path + ".err");
  std::ifstream err(path + ".err");
  std::stringstream ss;
  ss << err.rdbuf();
  p.errors = ss.str();
  if (r.status != 0) p.errors += " (exit " + std::to_string(r.status) + ")";
  auto j = json::parse(r.out, nullptr, false);
  if (j.is_discarded()) return p;
  if (j.contains("streams") && !j["streams"].empty()) p.stream = j["streams"][0];
  for (const auto& f : j.value("frames", json::array()))
    p.frames.emplace_back(f.value("key_frame", 0) == 1, std::stod(f.value("pts_time", "0")));
  p.duration = std::stod(j["format"].value("duration", "0"));
  return p;
}

class SegmentEncoderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("deskbox-segment-" + std::to_string(::getpid()) + "-" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) { return (dir_ / name).string(); }
  std::unique_ptr<SegmentEncoder> OpenOrDie(const std::string& path, EncoderSettings s = {}) {
    auto e = SegmentEncoder::Open(path, kW, kH, s);
    EXPECT_TRUE(e) << e.error().message;
    return e ? std::move(*e) : nullptr;
  }
  // Frames every `step` ms from `from` to `to`, the square moving 1 px per `ms_per_px` ms.
  ::testing::AssertionResult AddMoving(SegmentEncoder& enc, int from, int to, int step, int ms_per_px) {
    for (int t = from; t <= to; t += step) {
      auto px = Screen(static_cast<uint32_t>(t / ms_per_px));
      if (auto r = enc.AddFrame(px.data(), kW * 4, t); !r) return ::testing::AssertionFailure() << r.error().message;
    }
    return ::testing::AssertionSuccess();
  }
  std::string Read(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), {}};
  }
  fs::path dir_;
};

TEST_F(SegmentEncoderTest, WritesH264InAFragmentedMp4ThatReadsBackFrameForFrame) {
  auto path = Path("0.mp4");
  auto enc = OpenOrDie(path);
  ASSERT_TRUE(enc);
  for (int i = 0; i < 30; ++i) {
    auto px = Screen(static_cast<uint32_t>(i * 8));
    ASSERT_TRUE(enc->AddFrame(px.data(), kW * 4, i * 67));
  }
  auto stats = enc->Finish(2000);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->frames, 31u);  // and the last one again at the end
  EXPECT_EQ(stats->bytes, fs::file_size(path));
  Probe p = ProbeFile(path);
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(p.stream.value("codec_name", ""), "h264");
  EXPECT_EQ(p.stream.value("pix_fmt", ""), "yuv420p");  // what browsers play
  EXPECT_EQ(p.stream.value("width", 0), int(kW));
  EXPECT_EQ(p.stream.value("height", 0), int(kH));
  ASSERT_EQ(p.frames.size(), 31u);
  EXPECT_NEAR(p.frames[10].second, 0.670, 0.001);  // each frame at its own time
  EXPECT_NEAR(p.frames.back().second, 2.0, 0.001);
  auto layout = ScanFragments(Read(path));
  ASSERT_TRUE(layout) << layout.error().message;
  EXPECT_TRUE(layout->complete);
  EXPECT_GE(layout->fragments, 1u);
}

TEST_F(SegmentEncoderTest, KeyframesComeByTimeAndEachStartsAFragment) {
  auto path = Path("0.mp4");
  auto enc = OpenOrDie(path, {.keyframe_every = 2000ms});
  ASSERT_TRUE(enc);
  ASSERT_TRUE(AddMoving(*enc, 0, 6000, 500, 50));  // every 500 ms for 6 s
  auto stats = enc->Finish(6000);
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->keyframes, 4u);
  Probe p = ProbeFile(path);
  EXPECT_EQ(p.errors, "");
  std::vector<double> keys;
  for (auto [key, t] : p.frames)
    if (key) keys.push_back(t);
  EXPECT_EQ(keys, (std::vector<double>{0, 2, 4, 6}));
  auto layout = ScanFragments(Read(path));
  ASSERT_TRUE(layout);
  EXPECT_EQ(layout->fragments, 4u);
}

TEST_F(SegmentEncoderTest, AStillScreenCostsOneKeyframeAndAFewBytesAFragment) {
  auto px = Screen(10);
  // What one picture costs: a segment of one frame, lasting 10 s.
  auto one_path = Path("one.mp4");
  uint64_t one_bytes = 0;
  {
    auto one = OpenOrDie(one_path, {.keyframe_every = 2000ms});
    ASSERT_TRUE(one);
    ASSERT_TRUE(one->AddFrame(px.data(), kW * 4, 0));
    auto stats = one->Finish(10000);
    ASSERT_TRUE(stats);
    one_bytes = stats->bytes;
  }

  auto path = Path("0.mp4");
  auto enc = OpenOrDie(path, {.keyframe_every = 2000ms});
  ASSERT_TRUE(enc);
  ASSERT_TRUE(enc->KeepAlive(500));  // nothing before a first frame
  EXPECT_EQ(enc->stats().frames, 0u);
  ASSERT_TRUE(enc->AddFrame(px.data(), kW * 4, 0));
  for (int t = 250; t <= 9000; t += 250) ASSERT_TRUE(enc->KeepAlive(t));
  EXPECT_EQ(enc->stats().frames, 5u);  // 0, 2, 4, 6, 8 s
  EXPECT_EQ(enc->stats().keyframes, 1u) << "a keep-alive is a predicted frame";

  // What a kill -9 now would leave: the fragments up to the one the 8 s frame started, whole,
  // and playable once cut to them although only the first begins with a keyframe.
  std::string on_disk = Read(path);
  auto layout = ScanFragments(on_disk);
  ASSERT_TRUE(layout) << layout.error().message;
  EXPECT_EQ(layout->fragments, 4u);  // 0–2, 2–4, 4–6, 6–8 s
  auto cut = Path("cut.mp4");
  std::ofstream(cut, std::ios::binary) << on_disk.substr(0, layout->whole_length);
  Probe c = ProbeFile(cut);
  EXPECT_EQ(c.errors, "");
  ASSERT_EQ(c.frames.size(), 4u);
  EXPECT_NEAR(c.frames.back().second, 6.0, 0.001);

  auto stats = enc->Finish(10000);
  ASSERT_TRUE(stats);
  Probe p = ProbeFile(path);
  EXPECT_EQ(p.errors, "");
  ASSERT_EQ(p.frames.size(), 6u);
  for (size_t i = 0; i < p.frames.size(); ++i) {
    EXPECT_EQ(p.frames[i].first, i == 0) << "frame " << i;
    if (i < 5) {
      EXPECT_NEAR(p.frames[i].second, 2.0 * double(i), 0.001) << "frame " << i;
    }
  }
  EXPECT_NEAR(p.duration, 10.0, 0.1);
  auto whole = ScanFragments(Read(path));
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->fragments, 5u);
  // Four more fragments than the one-picture segment, each a moof and a skipped frame.
  EXPECT_LT(stats->bytes, one_bytes + 4 * 400) << stats->bytes << " vs " << one_bytes;
}

TEST_F(SegmentEncoderTest, AFileCutOffByACrashPlaysUpToItsLastWholeFragment) {
  auto path = Path("0.mp4");
  auto enc = OpenOrDie(path, {.keyframe_every = 1000ms});
  ASSERT_TRUE(enc);
  ASSERT_TRUE(AddMoving(*enc, 0, 3500, 100, 20));
  // What is on disk now is what a kill -9 would leave: no trailer, the fragment from 3 s on
  // still in the muxer.
  std::string on_disk = Read(path);
  auto layout = ScanFragments(on_disk);
  ASSERT_TRUE(layout) << layout.error().message;
  EXPECT_EQ(layout->fragments, 3u);  // 0–1, 1–2, 2–3 s
  auto cut = Path("cut.mp4");
  std::ofstream(cut, std::ios::binary) << on_disk.substr(0, layout->whole_length);
  Probe p = ProbeFile(cut);
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(p.stream.value("codec_name", ""), "h264");
  ASSERT_EQ(p.frames.size(), 30u);
  EXPECT_NEAR(p.frames.back().second, 2.9, 0.001);
  enc.reset();  // closing without Finish adds nothing that breaks the whole part
  auto after = ScanFragments(Read(path));
  ASSERT_TRUE(after);
  EXPECT_GE(after->fragments, 3u);
}

TEST_F(SegmentEncoderTest, RefusesWhatItCannotWriteWithTheReason) {
  auto odd = SegmentEncoder::Open(Path("odd.mp4"), 321, 200, {});
  ASSERT_FALSE(odd);
  EXPECT_EQ(odd.error().message, "a 321x200 screen cannot be encoded: sides must be even, 16..8192");
  std::ofstream(Path("there.mp4")) << "x";
  auto there = SegmentEncoder::Open(Path("there.mp4"), kW, kH, {});
  ASSERT_FALSE(there);
  EXPECT_NE(there.error().message.find("File exists"), std::string::npos) << there.error().message;
  EXPECT_EQ(Read(Path("there.mp4")), "x");
  auto enc = OpenOrDie(Path("0.mp4"));
  ASSERT_TRUE(enc);
  auto px = Screen(0);
  ASSERT_TRUE(enc->AddFrame(px.data(), kW * 4, 100));
  auto back = enc->AddFrame(px.data(), kW * 4, 100);
  ASSERT_FALSE(back);
  EXPECT_EQ(back.error().message, "frame at 100 ms: frames must go forward in time (last at 100 ms)");
  EXPECT_FALSE(enc->AddFrame(px.data(), kW * 2, 200));
  ASSERT_TRUE(enc->Finish(300));
  EXPECT_FALSE(enc->AddFrame(px.data(), kW * 4, 400));
  EXPECT_FALSE(enc->Finish(500));
}

}  // namespace
}  // namespace deskbox::recorder
