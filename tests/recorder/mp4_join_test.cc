// PlanJoin / ReadJoined: real segments from SegmentEncoder joined into one MP4 that ffprobe and
// ffmpeg read frame for frame; reads at any offset; a live segment's whole prefix; what a
// different screen size does; bad input; and hand-made fragments for what FFmpeg never writes
// (a version 0 tfdt that outgrows 32 bits, no tfdt at all).
#include "recorder/mp4_join.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "recorder/mp4_fragments.h"
#include "recorder_test_util.h"
#include "recorder/segment_encoder.h"

namespace deskbox::recorder {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

// A screen with a white square at (x, h/5) on a grey of `bg`.
std::vector<uint8_t> Screen(uint32_t w, uint32_t h, uint32_t x, uint8_t bg) {
  std::vector<uint8_t> px(size_t{w} * h * 4, bg);
  for (uint32_t y = h / 5; y < h / 5 + 40 && y < h; ++y)
    for (uint32_t i = x % w; i < x % w + 40 && i < w; ++i)
      for (int c = 0; c < 3; ++c) px[(size_t{y} * w + i) * 4 + c] = 0xff;
  return px;
}

using testing::Shell;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

struct Frame {
  bool key;
  double time;
  int width, height;
};
// ffprobe's view of a file: its frames (decoded) and any error it printed.
struct Probe {
  std::vector<Frame> frames;
  double duration = 0, stream_duration = 0;
  std::string errors;
};
double Number(const json& j, const char* key) {
  std::string v = j.value(key, "0");
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  return end == v.c_str() ? 0 : d;
}
Probe ProbeFile(const std::string& path) {
  Probe p;
  auto r = Shell(std::string(DESKBOX_FFPROBE) +
                 " -v error -show_streams -show_format -show_frames -of json '" + path + "' 2>" +
                 path + ".err");
  p.errors = ReadAll(path + ".err");
  if (r.status != 0) p.errors += " (exit " + std::to_string(r.status) + ")";
  auto j = json::parse(r.out, nullptr, false);
  if (j.is_discarded()) return p;
  for (const auto& f : j.value("frames", json::array()))
    p.frames.push_back({f.value("key_frame", 0) == 1, Number(f, "pts_time"), f.value("width", 0),
                        f.value("height", 0)});
  p.duration = Number(j["format"], "duration");
  if (j.contains("streams") && !j["streams"].empty())
    p.stream_duration = Number(j["streams"][0], "duration");
  return p;
}

// ffmpeg decoding every frame; what it printed. Frames keep their own times (-fps_mode
// passthrough -enc_time_base -1): by default the CLI re-times them to a rate it guesses (10/s)
// and complains "non monotonically increasing dts" of two frames within one tick, which a
// segment's last frame (lasting 1 ms) and the next segment's first are — as are the last two
// frames of a lone segment ending 1 ms after its last frame.
std::string Decode(const std::string& path) {
  auto r = Shell(std::string(DESKBOX_FFMPEG) + " -nostdin -v error -i '" + path +
                 "' -fps_mode passthrough -enc_time_base -1 -f null - 2>&1");
  return r.status == 0 ? r.out : r.out + " (exit " + std::to_string(r.status) + ")";
}

// Inputs held in memory.
class MemoryReader : public JoinReader {
 public:
  explicit MemoryReader(std::vector<std::string> files) : files_(std::move(files)) {}
  std::expected<void, JoinError> Read(int input, uint64_t offset, std::span<char> out) override {
    const std::string& f = files_.at(static_cast<size_t>(input));
    if (offset > f.size() || out.size() > f.size() - offset)
      return std::unexpected(JoinError{"past the end"});
    std::copy_n(f.data() + offset, out.size(), out.data());
    return {};
  }
  std::vector<JoinInput> Inputs() const {
    std::vector<JoinInput> in;
    for (size_t i = 0; i < files_.size(); ++i)
      in.push_back({"mem" + std::to_string(i), files_[i].size()});
    return in;
  }

 private:
  std::vector<std::string> files_;
};

std::string Whole(const JoinedMp4& plan, JoinReader& reader) {
  std::string out(plan.size, '\0');
  auto n = ReadJoined(plan, reader, 0, out);
  EXPECT_TRUE(n) << n.error().message;
  EXPECT_EQ(n.value_or(0), plan.size);
  return out;
}

// The boxes of `b` from `at` to `end`: (offset, size, type), 32-bit sizes only (what a test
// checks is written that way).
struct BoxAt {
  size_t at, size;
  std::string type;
};
uint64_t Be(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}
std::vector<BoxAt> Boxes(std::string_view b, size_t at, size_t end) {
  std::vector<BoxAt> out;
  while (at + 8 <= end) {
    size_t size = Be(b, at, 4);
    if (size < 8) break;
    out.push_back({at, size, std::string(b.substr(at + 4, 4))});
    at += size;
  }
  return out;
}
// The first box of `path` (a list of types, nested) in `b`.
std::optional<BoxAt> Find(std::string_view b, std::vector<std::string> path, size_t at = 0,
                          size_t end = 0) {
  if (!end) end = b.size();
  for (const BoxAt& box : Boxes(b, at, end)) {
    if (box.type != path.front()) continue;
    if (path.size() == 1) return box;
    return Find(b, {path.begin() + 1, path.end()}, box.at + 8, box.at + box.size);
  }
  return std::nullopt;
}

class Mp4JoinTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("deskbox-join-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) { return (dir_ / name).string(); }

  // A finished segment: frames every 100 ms from 0 to `ms` (the last at `ms`, lasting 1 ms), a
  // keyframe each second.
  JoinInput Segment(const std::string& name, int ms, uint32_t w = 320, uint32_t h = 200,
                    uint8_t bg = 0x40) {
    auto path = Path(name);
    auto enc = SegmentEncoder::Open(path, w, h, {.keyframe_every = 1000ms});
    EXPECT_TRUE(enc) << enc.error().message;
    if (!enc) return {};
    for (int t = 0; t < ms; t += 100) {
      auto px = Screen(w, h, static_cast<uint32_t>(t / 20), bg);
      EXPECT_TRUE((*enc)->AddFrame(px.data(), w * 4, t));
    }
    auto stats = (*enc)->Finish(ms);
    EXPECT_TRUE(stats) << stats.error().message;
    return {path, fs::file_size(path)};
  }

  std::string Write(const std::string& name, const std::string& bytes) {
    std::ofstream(Path(name), std::ios::binary) << bytes;
    return Path(name);
  }

  fs::path dir_;
};

TEST_F(Mp4JoinTest, ThreeSegmentsPlayAsOneFileFrameForFrame) {
  std::vector<JoinInput> in = {Segment("0.mp4", 3000), Segment("1.mp4", 2500, 320, 200, 0x80),
                               Segment("2.mp4", 4000, 320, 200, 0x20)};
  std::vector<Probe> alone;
  for (const auto& i : in) alone.push_back(ProbeFile(i.path));
  auto plan = PlanJoin(in);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->joined_inputs, 3u);
  EXPECT_EQ(plan->stopped_because, "");
  EXPECT_EQ(plan->sample_entries, 1u);
  EXPECT_EQ(plan->timescale, 16000u);  // FFmpeg's choice for a 1/1000 time base
  // Each segment lasts until its Finish time, exactly.
  EXPECT_EQ(plan->segment_offset_ms, (std::vector<int64_t>{0, 3000, 5500}));
  EXPECT_EQ(plan->duration_ms, 9500);
  // Pieces: ftyp + moov, then moof, mdat per fragment; contiguous.
  uint64_t at = 0, mdat_bytes = 0;
  for (const JoinPiece& p : plan->pieces) {
    EXPECT_EQ(p.offset, at);
    at += p.length;
    if (p.input >= 0) mdat_bytes += p.length;
    EXPECT_EQ(p.input < 0, p.length == p.bytes.size());
  }
  EXPECT_EQ(at, plan->size);
  EXPECT_LT(plan->size - mdat_bytes, 4096u);  // all but a few boxes is read from the files

  FileJoinReader reader(in);
  std::string joined = Whole(*plan, reader);
  auto path = Write("joined.mp4", joined);
  Probe p = ProbeFile(path);
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(Decode(path), "");
  size_t frames = 0;
  for (const Probe& a : alone) frames += a.frames.size();
  ASSERT_EQ(p.frames.size(), frames);
  EXPECT_NEAR(p.duration, alone[0].duration + alone[1].duration + alone[2].duration, 0.002);
  EXPECT_NEAR(p.stream_duration, 9.5, 0.002);  // from the rewritten moov
  // Every frame where its segment put it, shifted by the segment's offset; times go forward.
  size_t i = 0;
  for (size_t s = 0; s < alone.size(); ++s)
    for (const Frame& f : alone[s].frames) {
      EXPECT_NEAR(p.frames[i].time, f.time + plan->segment_offset_ms[s] / 1000.0, 0.0005) << i;
      EXPECT_EQ(p.frames[i].key, f.key) << i;
      if (i > 0) {
        EXPECT_GT(p.frames[i].time, p.frames[i - 1].time) << i;
      }
      ++i;
    }
  auto layout = ScanFragments(joined);
  ASSERT_TRUE(layout) << layout.error().message;
  EXPECT_TRUE(layout->complete);

  // mfhd sequence numbers run on across segments.
  uint32_t expect = 1;
  for (const BoxAt& b : Boxes(joined, 0, joined.size())) {
    if (b.type != "moof") continue;
    auto mfhd = Find(joined, {"mfhd"}, b.at + 8, b.at + b.size);
    ASSERT_TRUE(mfhd);
    EXPECT_EQ(Be(joined, mfhd->at + 12, 4), expect++);
  }
  EXPECT_EQ(expect - 1, layout->fragments);
  // mehd was added: the duration in the movie timescale (1000).
  auto mehd = Find(joined, {"moov", "mvex", "mehd"});
  ASSERT_TRUE(mehd);
  EXPECT_EQ(Be(joined, mehd->at + 12, 4), 9500u);

  // The joined file joins again to itself.
  auto again = PlanJoin({{path, joined.size()}});
  ASSERT_TRUE(again) << again.error().message;
  FileJoinReader reader2({{path, joined.size()}});
  EXPECT_EQ(Whole(*again, reader2), joined);
}

TEST_F(Mp4JoinTest, ReadsAtAnyOffsetMatchTheWholeFile) {
  std::vector<JoinInput> in = {Segment("0.mp4", 2000), Segment("1.mp4", 1500)};
  auto plan = PlanJoin(in);
  ASSERT_TRUE(plan) << plan.error().message;
  // The pieces read one by one, straight from the files.
  std::string pieces;
  for (const JoinPiece& p : plan->pieces)
    pieces += p.input < 0 ? p.bytes : ReadAll(in[p.input].path).substr(p.file_offset, p.length);
  ASSERT_EQ(pieces.size(), plan->size);
  FileJoinReader reader(in);
  EXPECT_EQ(Whole(*plan, reader), pieces);
  // In odd-sized chunks.
  for (size_t chunk : {1, 7, 100, 4093, 65537}) {
    std::string got;
    std::string buf(chunk, '\0');
    for (uint64_t at = 0;;) {
      auto n = ReadJoined(*plan, reader, at, buf);
      ASSERT_TRUE(n) << n.error().message;
      if (*n == 0) break;
      EXPECT_TRUE(*n == chunk || at + *n == plan->size);
      got.append(buf, 0, *n);
      at += *n;
    }
    EXPECT_EQ(got, pieces) << chunk;
  }
  // Range requests: any offset and length, one at the end, past the end, empty.
  std::mt19937_64 rng(7);
  for (int k = 0; k < 300; ++k) {
    uint64_t at = rng() % (plan->size + 10);
    std::string buf(rng() % 3000, '\0');
    auto n = ReadJoined(*plan, in, at, buf);  // the file-opening overload
    ASSERT_TRUE(n) << n.error().message;
    size_t want = at >= plan->size ? 0 : std::min<size_t>(buf.size(), plan->size - at);
    ASSERT_EQ(*n, want) << at;
    EXPECT_EQ(buf.substr(0, *n), at >= plan->size ? "" : pieces.substr(at, want)) << at;
  }
  std::string last(5, '\0');
  EXPECT_EQ(ReadJoined(*plan, reader, plan->size - 1, last).value_or(0), 1u);
  EXPECT_EQ(last[0], pieces.back());
}

TEST_F(Mp4JoinTest, ALiveSegmentJoinsUpToItsLastWholeFragment) {
  JoinInput first = Segment("0.mp4", 2000);
  // A segment still being written: what is on disk ends with the last fragment the muxer put
  // out (the one from 2 s on is still in the muxer).
  auto live_path = Path("1.mp4");
  auto enc = SegmentEncoder::Open(live_path, 320, 200, {.keyframe_every = 1000ms});
  ASSERT_TRUE(enc);
  for (int t = 0; t <= 2500; t += 100) {
    auto px = Screen(320, 200, static_cast<uint32_t>(t / 20), 0x80);
    ASSERT_TRUE((*enc)->AddFrame(px.data(), 320 * 4, t));
  }
  std::string on_disk = ReadAll(live_path);
  auto layout = ScanFragments(on_disk);
  ASSERT_TRUE(layout);
  ASSERT_EQ(layout->fragments, 2u);
  std::vector<JoinInput> in = {first, {live_path, layout->whole_length}};
  auto plan = PlanJoin(in);
  ASSERT_TRUE(plan) << plan.error().message;
  FileJoinReader reader(in);
  auto path = Write("joined.mp4", Whole(*plan, reader));
  Probe p = ProbeFile(path);
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(Decode(path), "");
  EXPECT_EQ(p.frames.size(), 21u + 20u);  // 0..2000 and the live one's 0..1900
  EXPECT_EQ(plan->segment_offset_ms, (std::vector<int64_t>{0, 2000}));
  EXPECT_NEAR(p.frames.back().time, 2.0 + 1.9, 0.0005);

  // A finished segment used up to a fragment boundary inside it (the file goes on).
  JoinInput whole = Segment("2.mp4", 3000);
  std::string bytes = ReadAll(whole.path);
  size_t last_moof = 0;
  for (const BoxAt& b : Boxes(bytes, 0, bytes.size()))
    if (b.type == "moof") last_moof = b.at;
  auto cut = ScanFragments(bytes.substr(0, last_moof + 10));
  ASSERT_TRUE(cut);
  ASSERT_EQ(cut->whole_length, last_moof);
  ASSERT_LT(cut->whole_length, whole.length);
  ASSERT_GE(cut->fragments, 1u);
  std::vector<JoinInput> in2 = {first, {whole.path, cut->whole_length}};
  auto plan2 = PlanJoin(in2);
  ASSERT_TRUE(plan2) << plan2.error().message;
  FileJoinReader reader2(in2);
  auto path2 = Write("joined2.mp4", Whole(*plan2, reader2));
  Probe prefix = ProbeFile(Write("prefix.mp4", bytes.substr(0, cut->whole_length)));
  Probe p2 = ProbeFile(path2);
  EXPECT_EQ(p2.errors, "");
  EXPECT_EQ(p2.frames.size(), 21u + prefix.frames.size());
}

TEST_F(Mp4JoinTest, ANewScreenSizeJoinsOnlyWhenItsFirstFrameCarriesItsParameterSets) {
  // SegmentEncoder's keyframes carry SPS and PPS in the stream (x264's repeat-headers): the
  // joined stsd holds both sample entries, each fragment names its own, and every frame decodes
  // at its own size.
  std::vector<JoinInput> in = {Segment("0.mp4", 2000), Segment("1.mp4", 1000),
                               Segment("2.mp4", 2000, 640, 400), Segment("3.mp4", 1000)};
  auto plan = PlanJoin(in);
  ASSERT_TRUE(plan) << plan.error().message;
  EXPECT_EQ(plan->joined_inputs, 4u) << plan->stopped_because;
  EXPECT_EQ(plan->sample_entries, 2u);
  FileJoinReader reader(in);
  auto path = Write("joined.mp4", Whole(*plan, reader));
  Probe p = ProbeFile(path);
  EXPECT_EQ(p.errors, "");
  EXPECT_EQ(Decode(path), "");
  ASSERT_EQ(p.frames.size(), 21u + 11u + 21u + 11u);
  for (size_t i = 0; i < p.frames.size(); ++i) {
    bool big = i >= 32 && i < 53;
    EXPECT_EQ(p.frames[i].width, big ? 640 : 320) << i;
  }

  // Segments that keep SPS and PPS in the sample entry only: Chromium and ffmpeg do not switch
  // to a second sample entry's (see NewEntryPlays in mp4_join.cc), so the join stops where the
  // size changes, and the rest can be joined on its own.
  std::vector<JoinInput> inband;
  std::vector<JoinInput> entry_only;
  for (auto [name, size, repeat] : {std::tuple{"a.mp4", "320x200", true}, {"b.mp4", "640x400", true},
                                    {"c.mp4", "320x200", true}, {"d.mp4", "320x200", false},
                                    {"e.mp4", "640x400", false}}) {
    auto r =
        Shell(std::string(DESKBOX_FFMPEG) + " -nostdin -v error -f lavfi -i testsrc2=size=" + size +
              ":rate=10:duration=2 -c:v libx264 -preset ultrafast -tune zerolatency -bf 0 -g 10 " +
              (repeat ? "-x264-params repeat-headers=1 " : "") + "-pix_fmt yuv420p "
              "-movflags frag_keyframe+empty_moov+default_base_moof -f mp4 '" +
              Path(name) + "' 2>&1");
    ASSERT_EQ(r.status, 0) << r.out;
    (repeat ? inband : entry_only).push_back({Path(name), fs::file_size(Path(name))});
  }
  auto stopped = PlanJoin(entry_only);
  ASSERT_TRUE(stopped) << stopped.error().message;
  EXPECT_EQ(stopped->joined_inputs, 1u);
  EXPECT_NE(stopped->stopped_because.find(entry_only[1].path +
                                          ": its sample entry ('avc1') is not the one before it"),
            std::string::npos)
      << stopped->stopped_because;
  std::vector<JoinInput> rest(entry_only.begin() + 1, entry_only.end());
  auto rest_plan = PlanJoin(rest);
  ASSERT_TRUE(rest_plan);
  EXPECT_EQ(rest_plan->joined_inputs, 1u);

  auto plan3 = PlanJoin(inband);
  ASSERT_TRUE(plan3) << plan3.error().message;
  EXPECT_EQ(plan3->joined_inputs, 3u) << plan3->stopped_because;
  EXPECT_EQ(plan3->sample_entries, 2u);
  EXPECT_EQ(plan3->segment_offset_ms, (std::vector<int64_t>{0, 2000, 4000}));
  FileJoinReader reader3(inband);
  auto path3 = Write("inband.mp4", Whole(*plan3, reader3));
  Probe p3 = ProbeFile(path3);
  EXPECT_EQ(p3.errors, "");
  EXPECT_EQ(Decode(path3), "");
  ASSERT_EQ(p3.frames.size(), 60u);
  for (size_t i = 0; i < p3.frames.size(); ++i) {
    EXPECT_EQ(p3.frames[i].width, i / 20 == 1 ? 640 : 320) << i;
    EXPECT_EQ(p3.frames[i].height, i / 20 == 1 ? 400 : 200) << i;
  }
}

TEST_F(Mp4JoinTest, BadInputIsAnErrorNamingTheFileAndOffset) {
  JoinInput good = Segment("0.mp4", 2000);
  std::string bytes = ReadAll(good.path);
  auto plan_error = [&](std::vector<JoinInput> in) {
    auto plan = PlanJoin(in);
    EXPECT_FALSE(plan);
    return plan ? std::string() : plan.error().message;
  };
  // The last mdat says it is longer than the file.
  auto layout = ScanFragments(bytes.substr(0, bytes.size() - 1));  // whole up to the last mdat
  ASSERT_TRUE(layout);
  std::string longer = bytes.substr(0, layout->whole_length);
  size_t last_mdat = 0;
  for (const BoxAt& b : Boxes(longer, 0, longer.size()))
    if (b.type == "mdat") last_mdat = b.at;
  longer[last_mdat + 2] = static_cast<char>(longer[last_mdat + 2] + 1);
  auto p = Write("longer.mp4", longer);
  EXPECT_EQ(plan_error({good, {p, longer.size()}}),
            p + ": box 'mdat' of " + std::to_string(Be(longer, last_mdat, 4)) +
                " bytes runs past the end (" + std::to_string(longer.size() - last_mdat) +
                " bytes left) at " + std::to_string(last_mdat));
  // Garbage, nothing, a length past the file's end, no file.
  std::string garbage(5000, '\0');
  std::mt19937 rng(3);
  for (char& c : garbage) c = static_cast<char>(rng());
  p = Write("garbage.mp4", garbage);
  EXPECT_NE(plan_error({{p, garbage.size()}}).find(p + ": "), std::string::npos);
  p = Write("empty.mp4", "");
  EXPECT_EQ(plan_error({{p, 0}}), p + ": a box cut short at 0");
  EXPECT_NE(plan_error({good, {good.path, good.length + 100}}).find(good.path), std::string::npos);
  EXPECT_EQ(plan_error({{Path("none.mp4"), 100}}),
            Path("none.mp4") + ": No such file or directory");
  EXPECT_EQ(plan_error({}), "no segments to join");
  // A cut inside a fragment: the caller gives whole fragments only.
  EXPECT_NE(plan_error({{good.path, layout->whole_length - 5}}).find("runs past the end"),
            std::string::npos);
  // A read of a plan whose file went away.
  auto plan = PlanJoin({good});
  ASSERT_TRUE(plan);
  fs::remove(good.path);
  std::string buf(plan->size, '\0');
  auto n = ReadJoined(*plan, std::vector<JoinInput>{good}, 0, buf);
  ASSERT_FALSE(n);
  EXPECT_EQ(n.error().message, good.path + ": No such file or directory");

  // Every byte of the header and first fragment flipped: an error or a plan, never a crash, and a
  // plan reads whole.
  size_t upto = std::min<size_t>(bytes.size(), 3000);
  for (size_t i = 0; i < upto; ++i) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    MemoryReader mem({bytes, flipped});
    auto in = mem.Inputs();
    auto plan2 = PlanJoin(in, mem);
    if (!plan2) {
      EXPECT_EQ(plan2.error().message.rfind("mem1: ", 0), 0u) << i << ": " << plan2.error().message;
      continue;
    }
    Whole(*plan2, mem);
  }
}

// Hand-made segments: timescale 1000, one track, samples given as (duration, bytes).
std::string B(const std::string& type, const std::string& payload) {
  std::string out;
  uint32_t size = static_cast<uint32_t>(8 + payload.size());
  for (int i = 3; i >= 0; --i) out += static_cast<char>(size >> (8 * i));
  return out + type + payload;
}
std::string U(uint64_t v, int n) {
  std::string out;
  for (int i = n - 1; i >= 0; --i)
    out += static_cast<char>(i < 8 ? v >> (8 * i) : 0);  // n > 8: zeros first
  return out;
}
std::string Header() {
  std::string avcc = B("avcC", std::string("\x01\x42\x00\x1e\xff\xe0\x00", 7));
  std::string stsd = B("stsd", U(0, 4) + U(1, 4) + B("avc1", std::string(78, '\0') + avcc));
  std::string stbl = B("stbl", stsd + B("stts", U(0, 8)) + B("stsc", U(0, 8)) +
                                   B("stsz", U(0, 12)) + B("stco", U(0, 8)));
  std::string mdia =
      B("mdia", B("mdhd", U(0, 12) + U(1000, 4) + U(0, 8)) +
                    B("hdlr", U(0, 8) + "vide" + std::string(13, '\0')) + B("minf", stbl));
  std::string trak =
      B("trak", B("tkhd", U(3, 4) + U(0, 8) + U(1, 4) + U(0, 8) + std::string(60, '\0')) + mdia);
  std::string mvex = B("mvex", B("trex", U(0, 4) + U(1, 4) + U(1, 4) + U(0, 12)));
  return B("ftyp", "isom" + U(0, 4) + "isomiso6") +
         B("moov",
           B("mvhd", U(0, 12) + U(1000, 4) + U(0, 4) + std::string(80, '\0')) + trak + mvex);
}
// One fragment; tfdt_version -1: none.
std::string Fragment(uint32_t seq, int tfdt_version, uint64_t tfdt,
                     const std::vector<std::pair<uint32_t, std::string>>& samples) {
  std::string tfhd = B("tfhd", U(0x020000, 4) + U(1, 4));
  std::string tfdt_box = tfdt_version < 0    ? ""
                         : tfdt_version == 0 ? B("tfdt", U(0, 4) + U(tfdt, 4))
                                             : B("tfdt", U(0x01000000, 4) + U(tfdt, 8));
  std::string entries, data;
  for (const auto& [d, bytes] : samples) entries += U(d, 4) + U(bytes.size(), 4), data += bytes;
  size_t trun_size = 8 + 12 + entries.size();
  size_t moof_size = 8 + 16 + 8 + tfhd.size() + tfdt_box.size() + trun_size;
  std::string trun =
      B("trun", U(0x000301, 4) + U(samples.size(), 4) + U(moof_size + 8, 4) + entries);
  return B("moof", B("mfhd", U(0, 4) + U(seq, 4)) + B("traf", tfhd + tfdt_box + trun)) +
         B("mdat", data);
}

TEST_F(Mp4JoinTest, AMoofThatMustGrowMovesItsDataOffsets) {
  // 2 * 0xF0000000 ms: the second segment's time no longer fits a version 0 tfdt; the third has
  // none at all.
  std::string a = Header() + Fragment(1, 1, 0, {{0xF0000000, "AAAA"}, {0xF0000000, "aaaaaa"}});
  std::string b =
      Header() + Fragment(1, 0, 0, {{100, "BBBBB"}}) + Fragment(2, 0, 100, {{100, "bb"}});
  std::string c =
      Header() + Fragment(1, -1, 0, {{100, "CCC"}}) + Fragment(2, -1, 0, {{50, "ccccccc"}});
  MemoryReader mem({a, b, c});
  auto in = mem.Inputs();
  auto plan = PlanJoin(in, mem);
  ASSERT_TRUE(plan) << plan.error().message;
  const uint64_t a_end = 2 * uint64_t{0xF0000000};
  EXPECT_EQ(plan->segment_offset_ms,
            (std::vector<int64_t>{0, int64_t(a_end), int64_t(a_end) + 200}));
  EXPECT_EQ(plan->duration_units, a_end + 350);
  std::string joined = Whole(*plan, mem);
  // Each fragment's first sample where its (moved) data offset says, at the time expected.
  struct Want {
    std::string first;
    uint64_t time;
  };
  std::vector<Want> want = {{"AAAA", 0},
                            {"BBBBB", a_end},
                            {"bb", a_end + 100},
                            {"CCC", a_end + 200},
                            {"ccccccc", a_end + 300}};
  size_t k = 0;
  for (const BoxAt& moof : Boxes(joined, 0, joined.size())) {
    if (moof.type != "moof") continue;
    ASSERT_LT(k, want.size());
    auto tfdt = Find(joined, {"traf", "tfdt"}, moof.at + 8, moof.at + moof.size);
    auto trun = Find(joined, {"traf", "trun"}, moof.at + 8, moof.at + moof.size);
    ASSERT_TRUE(tfdt && trun);
    EXPECT_EQ(joined[tfdt->at + 8], 1) << k;  // version 1
    EXPECT_EQ(Be(joined, tfdt->at + 12, 8), want[k].time) << k;
    EXPECT_EQ(Be(joined, moof.at + moof.size + 4, 4), Be("mdat", 0, 4)) << k;  // the mdat follows
    size_t data = moof.at + Be(joined, trun->at + 16, 4);
    EXPECT_EQ(joined.substr(data, want[k].first.size()), want[k].first) << k;
    ++k;
  }
  EXPECT_EQ(k, want.size());
  // The moov: durations in 64 bits where they need it.
  auto mvhd = Find(joined, {"moov", "mvhd"});
  auto mehd = Find(joined, {"moov", "mvex", "mehd"});
  auto mdhd = Find(joined, {"moov", "trak", "mdia", "mdhd"});
  ASSERT_TRUE(mvhd && mehd && mdhd);
  EXPECT_EQ(joined[mvhd->at + 8], 1);
  EXPECT_EQ(Be(joined, mvhd->at + 12 + 16 + 4, 8), a_end + 350);
  EXPECT_EQ(joined[mehd->at + 8], 1);
  EXPECT_EQ(Be(joined, mehd->at + 12, 8), a_end + 350);
  EXPECT_EQ(Be(joined, mdhd->at + 12 + 16 + 4, 8), a_end + 350);
  auto layout = ScanFragments(joined);
  ASSERT_TRUE(layout) << layout.error().message;
  EXPECT_EQ(layout->fragments, 5u);
}

TEST_F(Mp4JoinTest, WhatNoRecordingSegmentHoldsIsRefusedWithTheReason) {
  std::string head = Header();
  std::string frag = Fragment(1, 1, 0, {{100, "AAAA"}});
  auto error = [](std::vector<std::string> files) {
    MemoryReader mem(std::move(files));
    auto in = mem.Inputs();
    auto plan = PlanJoin(in, mem);
    return plan ? std::string("joined") : plan.error().message;
  };
  EXPECT_EQ(error({head + frag}), "joined");
  // Two tracks.
  auto moov = Find(head, {"moov"});
  auto trak = Find(head, {"moov", "trak"});
  std::string two = head.substr(0, moov->at) + B("moov", head.substr(moov->at + 8, moov->size - 8) +
                                                             head.substr(trak->at, trak->size));
  EXPECT_EQ(error({two + frag}),
            "mem0: 'moov' has 2 tracks (one is joined) at " + std::to_string(moov->at));
  // No mvex.
  auto mvex = Find(head, {"moov", "mvex"});
  std::string no_mvex =
      head.substr(0, moov->at) + B("moov", head.substr(moov->at + 8, mvex->at - moov->at - 8));
  EXPECT_EQ(error({no_mvex + frag}),
            "mem0: 'moov' has no 'mvex': not a fragmented MP4 at " + std::to_string(moov->at));
  // A moof over 4 MiB.
  std::string big = B("moof", B("free", std::string(4 << 20, '\0'))) + B("mdat", "");
  EXPECT_EQ(error({head + big}),
            "mem0: 'moof' of 4194320 bytes is too large at " + std::to_string(head.size()));
  // Samples outside their mdat; an mdat alone; a moof alone.
  std::string outside = frag;
  outside[outside.size() - 9] = 8;  // an empty mdat: the sample runs past it
  outside.resize(outside.size() - 4);
  EXPECT_EQ(error({head + outside}), "mem0: 'trun' samples outside the 'mdat' that follows at " +
                                         std::to_string(head.size()));
  EXPECT_EQ(error({head + B("mdat", "x")}),
            "mem0: 'mdat' with no 'moof' before it at " + std::to_string(head.size()));
  EXPECT_EQ(error({head + frag.substr(0, Be(frag, 0, 4))}),
            "mem0: 'moof' with no 'mdat' after it at " + std::to_string(head.size()));
  // 64-bit box sizes and a last box of size 0 ("to the end of the file") are read.
  std::string mdat64 = std::string{0, 0, 0, 1} + "mdat" + U(16 + 4, 8) + "AAAA";
  size_t moof_size = Be(frag, 0, 4);
  std::string frag64 = frag.substr(0, moof_size);
  // data_offset counted from the moof: the 64-bit header is 8 bytes longer.
  auto trun = Find(frag64, {"moof", "traf", "trun"});
  std::string off = U(Be(frag64, trun->at + 16, 4) + 8, 4);
  frag64.replace(trun->at + 16, 4, off);
  EXPECT_EQ(error({head + frag64 + mdat64}), "joined");
  std::string mdat0 = std::string{0, 0, 0, 0} + "mdat" + "AAAA";
  EXPECT_EQ(error({head + frag.substr(0, moof_size) + mdat0}), "joined");
  // Nesting past 8 boxes deep.
  std::string deep = B("free", "");
  for (int i = 0; i < 10; ++i) deep = B("traf", deep);
  std::string deep_moof = B("moof", B("mfhd", U(0, 8)) + deep) + B("mdat", "");
  EXPECT_NE(error({head + deep_moof}).find("nested too deep"), std::string::npos);
}

}  // namespace
}  // namespace deskbox::recorder
