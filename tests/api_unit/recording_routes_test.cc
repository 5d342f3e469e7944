// The recording routes (docs/recording.md) on recordings planted as deskboxd leaves them: segment
// files made by SegmentEncoder in <recording dir>/<sandbox id>/, each with its `recording` event
// (phase "segment": size and SHA-256) in the sandbox's event log. What they serve (whole, in
// ranges, joined, 304, 416), what verification finds once a file is changed or gone, deletion,
// and replay tokens for a sandbox that was deleted. Then one sandbox recorded for real, from the
// fake guest screen, start to stop.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdio.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <regex>
#include <sstream>

#include "common/sha256.h"
#include "guest_services_fixture.h"
#include "recorder/event_json.h"
#include "recorder/mp4_fragments.h"
#include "recorder/recording_check.h"
#include "recorder/segment_encoder.h"

namespace deskbox::api {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string HexSha256(std::string_view bytes) { return ToHex(Sha256(bytes)); }

// A grey screen with a white square that moves with `frame`.
std::vector<uint8_t> Screen(uint32_t width, uint32_t height, int frame) {
  std::vector<uint8_t> px(size_t{width} * height * 4, 0x40);
  uint32_t x0 = (static_cast<uint32_t>(frame) * 4) % (width - 8);
  for (uint32_t y = 8; y < 16; ++y)
    for (uint32_t x = x0; x < x0 + 8; ++x)
      for (int c = 0; c < 3; ++c) px[(size_t{y} * width + x) * 4 + c] = 0xff;
  return px;
}

// ffprobe's duration of an MP4 (seconds), or -1 when it cannot read it.
double ProbeDuration(const std::string& path) {
  std::string cmd = std::string(DESKBOX_FFPROBE) +
                    " -v error -show_entries format=duration -of default=nw=1:nk=1 '" + path + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[256] = {};
  size_t n = fread(buf, 1, sizeof buf - 1, p);
  if (::pclose(p) != 0 || n == 0) return -1;
  return std::atof(buf);
}

struct Planted {
  uint32_t index = 0;
  std::string file, path, bytes, sha256;
  int64_t start_ms = 0, end_ms = 0;
};

class RecordingRoutesTest : public ApiRoutesTest {
 protected:
  // Recording is off for the sandboxes here: what a test plants must not mix with what the
  // recorder would write on its own.
  std::string CreateUnrecorded() { return Create({{"recording", {{"enabled", false}}}}); }
  std::string Dir(const std::string& id) { return h_.config().recording_dir + "/" + id; }
  std::string Url(const std::string& id, const std::string& rest) {
    return "/v1/sandboxes/" + id + rest;
  }

  // Encodes segment `index` of sandbox `id` (`frames` frames 100 ms apart, a keyframe every
  // 300 ms: several fragments) and logs its event, as the recorder and deskboxd do. Before any
  // recording route has read that sandbox's log: deskboxd reads it once and then keeps it up
  // to date with what it logs itself.
  Planted Plant(const std::string& id, uint32_t index, int64_t start_ms, uint32_t width = 64,
                uint32_t height = 48, int frames = 12) {
    Planted s;
    s.index = index;
    s.file = recorder::SegmentFile(index);
    s.path = Dir(id) + "/" + s.file;
    fs::create_directories(Dir(id));
    recorder::EncoderSettings settings;
    settings.keyframe_every = 300ms;
    auto encoder = recorder::SegmentEncoder::Open(s.path, width, height, settings);
    if (!encoder) {
      ADD_FAILURE() << encoder.error().message;
      return s;
    }
    for (int i = 0; i < frames; ++i) {
      auto px = Screen(width, height, i);
      auto added = (*encoder)->AddFrame(px.data(), size_t{width} * 4, i * 100);
      EXPECT_TRUE(added) << added.error().message;
    }
    auto stats = (*encoder)->Finish(frames * 100);
    EXPECT_TRUE(stats) << stats.error().message;
    s.bytes = Slurp(s.path);
    s.sha256 = HexSha256(s.bytes);
    s.start_ms = start_ms;
    s.end_ms = start_ms + frames * 100;
    auto r = SegmentEvent(s);
    r.set_width(width);
    r.set_height(height);
    r.set_frames(stats ? stats->frames : 0);
    Log(id, r);
    return s;
  }
  // The "segment" event that lists `s`.
  static recorder::v1::Recording SegmentEvent(const Planted& s) {
    recorder::v1::Recording r;
    r.set_phase("segment");
    r.set_index(s.index);
    r.set_file(s.file);
    r.set_start_unix_ms(s.start_ms);
    r.set_end_unix_ms(s.end_ms);
    r.set_bytes(s.bytes.size());
    r.set_sha256(s.sha256);
    return r;
  }
  // A file that is not an MP4, listed by its event as a segment.
  Planted PlantGarbage(const std::string& id, uint32_t index, int64_t start_ms) {
    Planted s;
    s.index = index;
    s.file = recorder::SegmentFile(index);
    s.path = Dir(id) + "/" + s.file;
    s.bytes = std::string(4096, 'x');
    fs::create_directories(Dir(id));
    std::ofstream(s.path, std::ios::binary) << s.bytes;
    s.sha256 = HexSha256(s.bytes);
    s.start_ms = start_ms;
    s.end_ms = start_ms + 1000;
    Log(id, SegmentEvent(s));
    return s;
  }
  void Log(const std::string& id, const recorder::v1::Recording& r) {
    h_.OnServer([&] {
      auto e = SystemEvent(id);
      *e.mutable_recording() = r;
      h_.events().Emit(std::move(e));
      return 0;
    });
  }

  ClientResponse Get(const std::string& target, std::map<std::string, std::string> headers = {}) {
    return h_.Send(verb::get, target, h_.key(), std::move(headers));
  }
  static std::string Etag(const Planted& s) { return "\"" + s.sha256.substr(0, 32) + "\""; }
  json Verify(const std::string& id) {
    auto r = Get(Url(id, "/events/verify"));
    EXPECT_EQ(r.status, 200u) << r.body;
    return Body(r);
  }
};

TEST_F(RecordingRoutesTest, ListsAPlantedSegmentAndServesItWhole) {
  std::string id = CreateUnrecorded();
  int64_t start = h_.clock().NowMs();
  Planted s = Plant(id, 0, start);
  ASSERT_FALSE(s.bytes.empty());

  auto r = Get(Url(id, "/recording"));
  ASSERT_EQ(r.status, 200u) << r.body;
  json j = Body(r);
  EXPECT_EQ(j.value("sandbox_id", ""), id);
  EXPECT_FALSE(j.value("enabled", true));
  EXPECT_EQ(j.value("status", ""), "disabled");
  EXPECT_EQ(j.value("problem", "x"), "");
  EXPECT_EQ(j.value("bytes", 0u), s.bytes.size());
  EXPECT_EQ(j.value("duration_ms", 0), s.end_ms - s.start_ms);
  EXPECT_EQ(j.value("url", ""), Url(id, "/recording.mp4"));
  ASSERT_EQ(j["segments"].size(), 1u) << r.body;
  json seg = j["segments"][0];
  EXPECT_EQ(seg.value("index", 99), 0);
  EXPECT_EQ(seg.value("file", ""), "000000.mp4");
  EXPECT_EQ(seg.value("start_ms", int64_t{0}), s.start_ms);
  EXPECT_EQ(seg.value("end_ms", int64_t{0}), s.end_ms);
  EXPECT_EQ(seg.value("start", ""), recorder::FormatTimeRfc3339(s.start_ms * 1'000'000));
  EXPECT_EQ(seg.value("video_offset_ms", -1), 0);
  EXPECT_EQ(seg.value("bytes", 0u), s.bytes.size());
  EXPECT_EQ(seg.value("sha256", ""), s.sha256);
  EXPECT_EQ(seg.value("width", 0), 64);
  EXPECT_EQ(seg.value("height", 0), 48);
  EXPECT_FALSE(seg.value("truncated", true));
  EXPECT_FALSE(seg.value("live", true));
  EXPECT_EQ(seg.value("url", ""), Url(id, "/recording/segments/000000.mp4"));

  r = Get(seg.value("url", ""));
  ASSERT_EQ(r.status, 200u) << r.body.substr(0, 200);
  EXPECT_EQ(r.body.size(), s.bytes.size());
  EXPECT_EQ(HexSha256(r.body), s.sha256);
  EXPECT_EQ(r.body, s.bytes);
  EXPECT_EQ(r.header("Content-Type"), "video/mp4");
  EXPECT_EQ(r.header("Content-Length"), std::to_string(s.bytes.size()));
  EXPECT_EQ(r.header("Accept-Ranges"), "bytes");
  EXPECT_EQ(r.header("ETag"), Etag(s));
  EXPECT_EQ(r.header("Content-Range"), "");

  // A replay token, as the replay page sends it.
  std::string replay = Token(id, "replay");
  r = h_.Send(verb::get, seg.value("url", "") + "?token=" + replay, "", {});
  EXPECT_EQ(r.status, 200u) << r.body.substr(0, 200);
  EXPECT_EQ(r.body, s.bytes);
}

TEST_F(RecordingRoutesTest, ServesARangeOfASegment) {
  std::string id = CreateUnrecorded();
  Planted s = Plant(id, 0, h_.clock().NowMs());
  ASSERT_GT(s.bytes.size(), 200u);
  std::string url = Url(id, "/recording/segments/000000.mp4");
  size_t n = s.bytes.size();

  auto r = Get(url, {{"Range", "bytes=10-99"}});
  ASSERT_EQ(r.status, 206u) << r.body.substr(0, 200);
  EXPECT_EQ(r.body, s.bytes.substr(10, 90));
  EXPECT_EQ(r.header("Content-Range"), fmt::format("bytes 10-99/{}", n));
  EXPECT_EQ(r.header("Content-Length"), "90");
  EXPECT_EQ(r.header("Content-Type"), "video/mp4");
  EXPECT_EQ(r.header("ETag"), Etag(s));
  EXPECT_EQ(r.header("Accept-Ranges"), "bytes");

  r = Get(url, {{"Range", "bytes=100-"}});  // to the end
  ASSERT_EQ(r.status, 206u);
  EXPECT_EQ(r.body, s.bytes.substr(100));
  EXPECT_EQ(r.header("Content-Range"), fmt::format("bytes 100-{}/{}", n - 1, n));

  r = Get(url, {{"Range", "bytes=-16"}});  // the last 16 bytes
  ASSERT_EQ(r.status, 206u);
  EXPECT_EQ(r.body, s.bytes.substr(n - 16));
  EXPECT_EQ(r.header("Content-Range"), fmt::format("bytes {}-{}/{}", n - 16, n - 1, n));

  r = Get(url, {{"Range", fmt::format("bytes={}-{}", n - 1, n + 1000)}});  // a last byte past the end
  ASSERT_EQ(r.status, 206u);
  EXPECT_EQ(r.body, s.bytes.substr(n - 1));
  EXPECT_EQ(r.header("Content-Range"), fmt::format("bytes {}-{}/{}", n - 1, n - 1, n));

  r = Get(url, {{"Range", "bytes=0-0"}, {"If-Range", Etag(s)}});  // the current ETag: the range
  ASSERT_EQ(r.status, 206u);
  EXPECT_EQ(r.body, s.bytes.substr(0, 1));

  // The whole body: another ETag in If-Range, several ranges, another unit, a range backwards.
  for (std::map<std::string, std::string> h :
       {std::map<std::string, std::string>{{"Range", "bytes=0-9"}, {"If-Range", "\"0123\""}},
        {{"Range", "bytes=0-9,20-29"}},
        {{"Range", "items=0-9"}},
        {{"Range", "bytes=9-0"}}}) {
    r = Get(url, h);
    EXPECT_EQ(r.status, 200u) << h.begin()->second;
    EXPECT_EQ(r.body, s.bytes);
    EXPECT_EQ(r.header("Content-Range"), "");
  }
}

TEST_F(RecordingRoutesTest, ARangePastTheEndIs416) {
  std::string id = CreateUnrecorded();
  Planted s = Plant(id, 0, h_.clock().NowMs());
  size_t n = s.bytes.size();
  for (const std::string& range : {fmt::format("bytes={}-", n), fmt::format("bytes={}-{}", n + 5, n + 9),
                                   std::string("bytes=-0")}) {
    auto r = Get(Url(id, "/recording/segments/000000.mp4"), {{"Range", range}});
    EXPECT_EQ(r.status, 416u) << range << ": " << r.body;
    EXPECT_EQ(Code(r), "range_not_satisfiable");
    EXPECT_EQ(r.header("Content-Range"), fmt::format("bytes */{}", n));
    EXPECT_EQ(r.header("Content-Type"), "application/json");
  }
  auto whole = Get(Url(id, "/recording.mp4"));
  ASSERT_EQ(whole.status, 200u) << whole.body.substr(0, 200);
  size_t joined = whole.body.size();
  auto r = Get(Url(id, "/recording.mp4"), {{"Range", fmt::format("bytes={}-", joined)}});
  EXPECT_EQ(r.status, 416u) << r.body;
  EXPECT_EQ(Code(r), "range_not_satisfiable");
  EXPECT_EQ(r.header("Content-Range"), fmt::format("bytes */{}", joined));
}

TEST_F(RecordingRoutesTest, TheCurrentETagIs304) {
  std::string id = CreateUnrecorded();
  Planted s = Plant(id, 0, h_.clock().NowMs());
  std::string url = Url(id, "/recording/segments/000000.mp4");
  auto r = Get(url, {{"If-None-Match", Etag(s)}});
  EXPECT_EQ(r.status, 304u) << r.body;
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(r.header("ETag"), Etag(s));
  EXPECT_TRUE(Get(url, {{"If-None-Match", Etag(s)}, {"Range", "bytes=0-9"}}).status == 304u);
  r = Get(url, {{"If-None-Match", "\"0123456789abcdef0123456789abcdef\""}});
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, s.bytes);

  auto whole = Get(Url(id, "/recording.mp4"));
  ASSERT_EQ(whole.status, 200u);
  std::string tag = whole.header("ETag");
  EXPECT_TRUE(std::regex_match(tag, std::regex("\"[0-9a-f]{32}\""))) << tag;
  r = Get(Url(id, "/recording.mp4"), {{"If-None-Match", tag}});
  EXPECT_EQ(r.status, 304u) << r.body;
  EXPECT_EQ(r.body, "");
  EXPECT_EQ(r.header("ETag"), tag);
}

TEST_F(RecordingRoutesTest, TheJoinedRecordingIsOneMp4) {
  std::string id = CreateUnrecorded();
  int64_t start = h_.clock().NowMs();
  Planted a = Plant(id, 0, start);
  // After a gap (not in the video), at another screen size (it plays on).
  Planted b = Plant(id, 1, a.end_ms + 60'000, 80, 48);

  auto listing = Body(Get(Url(id, "/recording")));
  ASSERT_EQ(listing["segments"].size(), 2u) << listing.dump();
  EXPECT_EQ(listing["segments"][1].value("video_offset_ms", 0), a.end_ms - a.start_ms);
  EXPECT_EQ(listing.value("duration_ms", 0), (a.end_ms - a.start_ms) + (b.end_ms - b.start_ms));

  auto r = Get(Url(id, "/recording.mp4"));
  ASSERT_EQ(r.status, 200u) << r.body.substr(0, 200);
  EXPECT_EQ(r.header("Content-Type"), "video/mp4");
  EXPECT_EQ(r.header("Accept-Ranges"), "bytes");
  EXPECT_EQ(r.header("Content-Length"), std::to_string(r.body.size()));
  ASSERT_GT(r.body.size(), 8u);
  EXPECT_EQ(r.body.substr(4, 4), "ftyp");
  auto layout = recorder::ScanFragments(r.body);
  ASSERT_TRUE(layout) << layout.error().message;
  EXPECT_TRUE(layout->complete);
  EXPECT_EQ(layout->whole_length, r.body.size());
  EXPECT_GT(layout->fragments, 2u);

  fs::path file = fs::path(h_.config().state_dir) / "joined.mp4";
  std::ofstream(file, std::ios::binary) << r.body;
  double seconds = ProbeDuration(file.string());
  fs::remove(file);
  EXPECT_NEAR(seconds, 2.4, 0.25) << "ffprobe's duration of the joined video";

  // A range of the joined video: the same bytes as the whole.
  auto part = Get(Url(id, "/recording.mp4"), {{"Range", "bytes=100-4195"}});
  ASSERT_EQ(part.status, 206u);
  EXPECT_EQ(part.body, r.body.substr(100, 4096));
  EXPECT_EQ(part.header("Content-Range"), fmt::format("bytes 100-4195/{}", r.body.size()));
  EXPECT_EQ(part.header("ETag"), r.header("ETag"));
}

TEST_F(RecordingRoutesTest, ASegmentThatIsNotAnMp4Is500ForTheJoinedVideo) {
  std::string id = CreateUnrecorded();
  Planted junk = PlantGarbage(id, 0, h_.clock().NowMs());
  auto r = Get(Url(id, "/recording.mp4"));
  EXPECT_EQ(r.status, 500u) << r.body.substr(0, 200);
  EXPECT_EQ(Code(r), "internal");
  EXPECT_NE(r.body.find("000000.mp4"), std::string::npos) << r.body;
  // The segment alone is served as it is, and it is what its event says.
  r = Get(Url(id, "/recording/segments/000000.mp4"));
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(r.body, junk.bytes);
  EXPECT_TRUE(Verify(id).value("ok", false));
}

TEST_F(RecordingRoutesTest, VerifyFindsAModifiedAndAMissingSegment) {
  std::string id = CreateUnrecorded();
  Planted s = Plant(id, 0, h_.clock().NowMs());
  json v = Verify(id);
  EXPECT_TRUE(v.value("ok", false)) << v.dump();
  EXPECT_EQ(v.value("segments_checked", 0), 1);
  EXPECT_GE(v.value("events", 0), 2);  // the sandbox's lifecycle, the segment
  EXPECT_TRUE(std::regex_match(v.value("head", ""), std::regex("[0-9a-f]{64}"))) << v.dump();
  EXPECT_TRUE(v["problems"].empty());
  // The head of the log is the one verify reached.
  auto head = Body(Get(Url(id, "/events/head")));
  EXPECT_EQ(head.value("head", ""), v.value("head", "x"));
  EXPECT_EQ(head.value("seq", 0), v.value("events", -1));

  // One byte flipped: the same size, another SHA-256.
  {
    std::fstream f(s.path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(s.bytes.size() / 2));
    f.put(static_cast<char>(s.bytes[s.bytes.size() / 2] ^ 0x01));
  }
  v = Verify(id);
  EXPECT_FALSE(v.value("ok", true));
  ASSERT_EQ(v["problems"].size(), 1u) << v.dump();
  EXPECT_EQ(v["problems"][0].value("kind", ""), "segment_modified");
  EXPECT_EQ(v["problems"][0].value("file", ""), "000000.mp4");
  EXPECT_EQ(v["problems"][0].value("index", -1), 0);
  EXPECT_NE(v["problems"][0].value("message", "").find(s.sha256), std::string::npos) << v.dump();

  // Gone.
  fs::remove(s.path);
  v = Verify(id);
  EXPECT_FALSE(v.value("ok", true));
  ASSERT_EQ(v["problems"].size(), 1u) << v.dump();
  EXPECT_EQ(v["problems"][0].value("kind", ""), "segment_missing");
  EXPECT_EQ(v["problems"][0].value("file", ""), "000000.mp4");
  auto r = Get(Url(id, "/recording/segments/000000.mp4"));
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(Code(r), "not_found");
  r = Get(Url(id, "/recording.mp4"));
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(Code(r), "not_found");

  // A file no event lists.
  std::ofstream(Dir(id) + "/000007.mp4") << "planted";
  v = Verify(id);
  ASSERT_EQ(v["problems"].size(), 2u) << v.dump();
  EXPECT_EQ(v["problems"][1].value("kind", ""), "segment_unlisted");
  EXPECT_EQ(v["problems"][1].value("file", ""), "000007.mp4");
}

TEST_F(RecordingRoutesTest, DeletingTheRecordingRemovesItsFilesAndKeepsTheLog) {
  std::string id = CreateUnrecorded();
  Planted a = Plant(id, 0, h_.clock().NowMs());
  Planted b = Plant(id, 1, a.end_ms);
  ASSERT_EQ(Body(Get(Url(id, "/recording")))["segments"].size(), 2u);

  // Only API keys delete.
  std::string replay = Token(id, "replay");
  auto r = h_.Call(verb::delete_, Url(id, "/recording"), "", replay);
  EXPECT_EQ(r.status, 403u) << r.body;
  EXPECT_TRUE(fs::exists(a.path));

  r = h_.Call(verb::delete_, Url(id, "/recording"));
  EXPECT_EQ(r.status, 204u) << r.body;
  EXPECT_FALSE(fs::exists(a.path));
  EXPECT_FALSE(fs::exists(b.path));
  EXPECT_FALSE(fs::exists(Dir(id)));
  json j = Body(Get(Url(id, "/recording")));
  EXPECT_TRUE(j["segments"].empty()) << j.dump();
  EXPECT_EQ(j.value("bytes", 1), 0);
  EXPECT_EQ(Get(Url(id, "/recording/segments/000000.mp4")).status, 404u);
  EXPECT_EQ(Get(Url(id, "/recording.mp4")).status, 404u);
  // The log says so, and what it lists is all there still is: nothing missing.
  json v = Verify(id);
  EXPECT_TRUE(v.value("ok", false)) << v.dump();
  EXPECT_EQ(v.value("segments_checked", 1), 0);
  json deleted, events = Body(Get(Url(id, "/events")))["events"];
  for (const auto& e : events)
    if (e.value("kind", "") == "recording" && e["recording"].value("phase", "") == "deleted")
      deleted = e;
  ASSERT_TRUE(deleted.is_object()) << "no recording event of phase deleted";
  EXPECT_EQ(deleted["recording"].value("index", 0), 2);  // every segment below 2 is gone
  EXPECT_EQ(deleted["recording"].value("detail", ""), "api");
  EXPECT_EQ(deleted["actor"].value("kind", ""), "api_key");
  EXPECT_TRUE(deleted.contains("request_id"));

  // Again: nothing left, still 204.
  EXPECT_EQ(h_.Call(verb::delete_, Url(id, "/recording")).status, 204u);
}

TEST_F(RecordingRoutesTest, AReplayTokenIsMadeForADeletedSandboxWhileItsRecordingIsKept) {
  std::string id = CreateUnrecorded();
  std::string other = CreateUnrecorded();
  Planted s = Plant(id, 0, h_.clock().NowMs());
  ASSERT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  ASSERT_EQ(State(id), "stopped");
  EXPECT_TRUE(fs::exists(s.path));

  // A view token no longer; a replay token yes.
  auto made = h_.Call(verb::post, Url(id, "/tokens"), R"({"scope": "view"})");
  EXPECT_EQ(made.status, 409u) << made.body;
  made = h_.Call(verb::post, Url(id, "/tokens"), R"({"scope": "replay", "ttl_s": 600})");
  ASSERT_EQ(made.status, 201u) << made.body;
  EXPECT_EQ(Body(made).value("scope", ""), "replay");
  std::string replay = Body(made).value("token", "");

  // It reads the recording, the events and the page, in the query or the header ...
  for (const char* rest :
       {"/recording", "/recording.mp4", "/recording/segments/000000.mp4", "/events",
        "/events/head", "/events/verify", "/replay"}) {
    auto r = h_.Send(verb::get, Url(id, rest) + "?token=" + replay, "", {});
    EXPECT_EQ(r.status, 200u) << rest << ": " << r.body.substr(0, 200);
    EXPECT_EQ(h_.Call(verb::get, Url(id, rest), "", replay).status, 200u) << rest;
  }
  auto page = h_.Send(verb::get, Url(id, "/replay?token=" + replay), "", {});
  EXPECT_TRUE(page.header("Content-Type").starts_with("text/html")) << page.header("Content-Type");
  EXPECT_NE(page.header("Content-Security-Policy").find("frame-ancestors 'none'"), std::string::npos);
  EXPECT_EQ(page.header("Referrer-Policy"), "no-referrer");
  // ... and nothing else: not the sandbox, not another sandbox's recording.
  EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id, "", replay).status, 403u);
  EXPECT_EQ(h_.Call(verb::get, Url(id, "/screenshot"), "", replay).status, 403u);
  EXPECT_EQ(h_.Call(verb::delete_, Url(id, "/recording"), "", replay).status, 403u);
  EXPECT_EQ(h_.Call(verb::get, Url(other, "/recording"), "", replay).status, 403u);
  EXPECT_EQ(h_.Call(verb::get, Url(other, "/events"), "", replay).status, 403u);

  // Once the recording is deleted, no new replay token; the one made still reads what is left.
  ASSERT_EQ(h_.Call(verb::delete_, Url(id, "/recording")).status, 204u);
  made = h_.Call(verb::post, Url(id, "/tokens"), R"({"scope": "replay"})");
  EXPECT_EQ(made.status, 409u) << made.body;
  EXPECT_EQ(Code(made), "invalid_state");
  auto r = h_.Call(verb::get, Url(id, "/recording"), "", replay);
  EXPECT_EQ(r.status, 200u);
  EXPECT_TRUE(Body(r)["segments"].empty());
}

// ---------------------------------------------------------------------------------------------
// Recorded for real: the fake guest screen through the screen mirror into the recorder, and the
// finished segment chained into the log when the sandbox stops.

class RecordingPipelineTest : public GuestServicesTest {
 protected:
  // Recording on, as deskboxd's default is. Keyframes every 10 s: the recorder times its
  // keep-alive frames by the wall clock, the frames it is offered by the service's clock (fake
  // here), and the test is over long before a keep-alive frame.
  RecordingPipelineTest()
      : GuestServicesTest([](DaemonConfig& c) {
          c.recording = true;
          c.recording_keyframe_s = 10;
        }) {}
};

TEST_F(RecordingPipelineTest, ARecordedSandboxListsItsSegmentOnceStopped) {
  std::string id = Create();
  auto sandbox = Body(h_.Call(verb::get, "/v1/sandboxes/" + id));
  EXPECT_TRUE(sandbox["recording"].value("enabled", false)) << sandbox.dump();
  EXPECT_EQ(sandbox["recording"].value("url", ""), "/v1/sandboxes/" + id + "/recording");
  std::string url = "/v1/sandboxes/" + id + "/recording";

  // The first frame opens segment 0.
  json j;
  ASSERT_TRUE(PollUntil(
      [&] {
        j = Body(h_.Call(verb::get, url));
        return j.value("status", "") == "recording" && j["segments"].size() == 1 &&
               j["segments"][0].value("live", false);
      },
      10s))
      << j.dump();
  EXPECT_EQ(j["segments"][0].value("sha256", "x"), "");
  EXPECT_EQ(j["segments"][0].value("file", ""), "000000.mp4");

  h_.clock().Advance(1s);
  ASSERT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  ASSERT_TRUE(PollUntil(
      [&] {
        j = Body(h_.Call(verb::get, url));
        return j["segments"].size() == 1 && !j["segments"][0].value("live", true) &&
               !j["segments"][0].value("sha256", "").empty();
      },
      10s))
      << j.dump();
  EXPECT_EQ(j.value("status", ""), "stopped");
  json seg = j["segments"][0];
  EXPECT_EQ(seg.value("width", 0), 64);
  EXPECT_EQ(seg.value("height", 0), 40);

  auto file = h_.Call(verb::get, seg.value("url", ""));
  ASSERT_EQ(file.status, 200u) << file.body.substr(0, 200);
  EXPECT_EQ(file.body.size(), seg.value("bytes", 0u));
  EXPECT_EQ(HexSha256(file.body), seg.value("sha256", ""));
  EXPECT_EQ(h_.Call(verb::get, url + ".mp4").status, 200u);

  json v = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events/verify"));
  EXPECT_TRUE(v.value("ok", false)) << v.dump();
  EXPECT_EQ(v.value("segments_checked", 0), 1);
  std::vector<std::string> phases;
  json events = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events"))["events"];
  for (const auto& e : events)
    if (e.value("kind", "") == "recording") phases.push_back(e["recording"].value("phase", ""));
  EXPECT_EQ(phases, (std::vector<std::string>{"started", "segment"}));
}

TEST_F(RecordingPipelineTest, AFollowerOfTheEventsGetsTheLastSegmentBeforeTheStreamEnds) {
  std::string id = Create();
  std::string url = "/v1/sandboxes/" + id + "/recording";
  json j;
  ASSERT_TRUE(PollUntil(
      [&] {
        j = Body(h_.Call(verb::get, url));
        return j["segments"].size() == 1 && j["segments"][0].value("live", false);
      },
      10s))
      << j.dump();
  // The stream ends once the sandbox is stopped; the segment is finished off the event loop
  // after that, and its event must still be on the stream.
  auto follow = std::async(std::launch::async, [&] {
    return h_.Call(verb::get, "/v1/sandboxes/" + id + "/events?follow=1&since=0");
  });
  std::this_thread::sleep_for(200ms);  // the follower is subscribed
  h_.clock().Advance(1s);
  ASSERT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  ASSERT_EQ(follow.wait_for(20s), std::future_status::ready) << "the follow stream ended";
  auto streamed = follow.get();
  ASSERT_EQ(streamed.status, 200u);
  std::vector<std::string> phases;
  std::istringstream lines(streamed.body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    json e = json::parse(line);
    if (e.value("kind", "") == "recording") phases.push_back(e["recording"].value("phase", ""));
  }
  EXPECT_EQ(phases, (std::vector<std::string>{"started", "segment"})) << streamed.body;
}

}  // namespace
}  // namespace deskbox::api
