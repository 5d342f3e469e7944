// Recording encoder benchmark, no guest: what recording one sandbox's screen costs the host.
//
// Screen-like 1280×800 BGRX frames (screen_content.h: a browser page scrolled, a window dragged
// over it, characters typed into a field) at 15 fps through recorder::SegmentEncoder as deployed
// (preset ultrafast, tune zerolatency, CRF 28, a keyframe every 2 s), each AddFrame timed by the
// thread's own CPU clock (CLOCK_THREAD_CPUTIME_ID). Baselines in the same run:
//   - the same frames through the encoder's colour conversion alone (sws_scale BGRX → YUV 4:2:0,
//     point sampling): what any encoder of these frames has to pay;
//   - a still screen: one frame, then the keep-alive frame (a predicted frame of skipped
//     macroblocks that starts a fragment) every 2 s for a segment's 60 s, and the segment's open
//     and finish; beside it the same picture alone in a 60 s segment (one keyframe, one fragment).
// Then recorder::ScreenRecorder end to end: frames offered at 15 fps in real time from another
// thread (the scenes in turn), how many it encoded and how many it dropped (its queue holds 2),
// and its thread's CPU.
//
//   recording_encode_bench [--seconds N] [--recorder-seconds N] [--fps N] [--preset P]
//                          [--screens a.png,b.png,...] [--out FILE]
// --seconds: video seconds per scene (default 20); --recorder-seconds: the real-time run
// (default 30; 0: skipped); --preset: libx264's (default ultrafast, as deployed); --screens:
// build the scenes from real screenshots (GET /v1/sandboxes/{id}/screenshot?format=png) instead
// of the drawn page; --out: the figures as JSON (default /tmp/recording_encode_bench.json).
//
// Exits 1 when full motion (scroll and drag) costs more than 15% of a core at 15 fps, when the
// recorder delivers fewer than 95% of the frames offered, or when a still minute costs more than
// 1.25x the bytes of its one picture alone (what the keep-alive frames add).
#include <fmt/format.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <thread>

#include "recorder/screen_recorder.h"
#include "recorder/segment_encoder.h"
#include "screen_content.h"

extern "C" {
#include <libavutil/log.h>
#include <libswscale/swscale.h>
}

namespace fs = std::filesystem;
using nlohmann::json;
using namespace deskbox;
using namespace deskbox::bench;
using namespace std::chrono_literals;

namespace {

constexpr double kMotionTarget = 0.15;     // of a core, full motion at 15 fps (the goal)
constexpr double kDeliveredTarget = 0.95;  // of the frames offered
constexpr double kStillTarget = 1.25;      // a still segment's bytes over its one picture's

double ThreadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

double ProcessCpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto ms = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_usec) / 1e3;
  };
  return ms(ru.ru_utime) + ms(ru.ru_stime);
}

double Pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double MibPerHour(uint64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds * 3600 / (1 << 20);
}

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One scene through SegmentEncoder: CPU per AddFrame (keyframes apart), the file's size.
struct SceneRun {
  Scene scene;
  std::vector<double> frame_ms, key_ms;  // CPU per AddFrame: other frames, keyframes
  double open_ms = 0, finish_ms = 0;
  recorder::SegmentStats stats;
  double video_s = 0;
  double CpuMs() const {
    return std::accumulate(frame_ms.begin(), frame_ms.end(), 0.0) +
           std::accumulate(key_ms.begin(), key_ms.end(), 0.0);
  }
  size_t Frames() const { return frame_ms.size() + key_ms.size(); }
  double MsPerFrame() const { return Frames() ? CpuMs() / static_cast<double>(Frames()) : 0; }
};

SceneRun EncodeScene(const ScreenContent& content, Scene scene, int frames, int fps,
                     const recorder::EncoderSettings& enc, const std::string& dir) {
  SceneRun r{scene};
  std::string path = fmt::format("{}/{}.mp4", dir, SceneName(scene));
  std::vector<uint8_t> px(size_t{content.width()} * content.height() * 4);
  double t0 = ThreadCpuMs();
  auto e = recorder::SegmentEncoder::Open(path, content.width(), content.height(), enc);
  r.open_ms = ThreadCpuMs() - t0;
  if (!e) throw Failure(e.error().message);
  auto& encoder = **e;
  for (int i = 0; i < frames; ++i) {
    content.Paint(scene, i, px.data());
    uint64_t keys = encoder.stats().keyframes;
    double c0 = ThreadCpuMs();
    if (auto a = encoder.AddFrame(px.data(), size_t{content.width()} * 4, int64_t{i} * 1000 / fps);
        !a)
      throw Failure(a.error().message);
    double ms = ThreadCpuMs() - c0;
    (encoder.stats().keyframes > keys ? r.key_ms : r.frame_ms).push_back(ms);
  }
  int64_t end = int64_t{frames} * 1000 / fps;
  double f0 = ThreadCpuMs();
  auto st = encoder.Finish(end);
  r.finish_ms = ThreadCpuMs() - f0;
  if (!st) throw Failure(st.error().message);
  r.stats = *st;
  r.video_s = static_cast<double>(end) / 1000.0;
  return r;
}

// The same frames through the encoder's colour conversion only.
std::vector<double> ConvertScene(const ScreenContent& content, Scene scene, int frames) {
  int w = static_cast<int>(content.width()), h = static_cast<int>(content.height());
  SwsContext* sws = sws_getContext(w, h, AV_PIX_FMT_BGR0, w, h, AV_PIX_FMT_YUV420P, SWS_POINT,
                                   nullptr, nullptr, nullptr);
  if (!sws) throw Failure("no BGRX to YUV 4:2:0 conversion");
  std::vector<uint8_t> px(size_t(w) * size_t(h) * 4), y(size_t(w) * size_t(h)),
      u(size_t(w) * size_t(h) / 4), v(size_t(w) * size_t(h) / 4);
  uint8_t* dst[3] = {y.data(), u.data(), v.data()};
  int dst_stride[3] = {w, w / 2, w / 2};
  std::vector<double> ms;
  for (int i = 0; i < frames; ++i) {
    content.Paint(scene, i, px.data());
    const uint8_t* src[1] = {px.data()};
    int src_stride[1] = {w * 4};
    double c0 = ThreadCpuMs();
    sws_scale(sws, src, src_stride, 0, h, dst, dst_stride);
    ms.push_back(ThreadCpuMs() - c0);
  }
  sws_freeContext(sws);
  return ms;
}

// A still screen for `seconds` of video: one frame, then KeepAlive as the recorder's thread calls
// it (every quarter of the keyframe interval; it codes a keep-alive frame once a fragment is
// that old); and the same picture alone in a segment as long, its one frame lasting to the end.
struct StillRun {
  double first_ms = 0, keepalive_ms = 0, open_ms = 0, finish_ms = 0, video_s = 0;
  uint64_t keyframes = 0, keepalives = 0, bytes = 0, one_picture_bytes = 0;
};
StillRun EncodeStill(const ScreenContent& content, int seconds,
                     const recorder::EncoderSettings& enc, const std::string& dir) {
  StillRun r;
  std::vector<uint8_t> px(size_t{content.width()} * content.height() * 4);
  content.Paint(Scene::kType, 0, px.data());
  double t0 = ThreadCpuMs();
  auto e =
      recorder::SegmentEncoder::Open(dir + "/still.mp4", content.width(), content.height(), enc);
  r.open_ms = ThreadCpuMs() - t0;
  if (!e) throw Failure(e.error().message);
  auto& encoder = **e;
  t0 = ThreadCpuMs();
  if (auto a = encoder.AddFrame(px.data(), size_t{content.width()} * 4, 0); !a)
    throw Failure(a.error().message);
  r.first_ms = ThreadCpuMs() - t0;
  int64_t step = std::max<int64_t>(1, enc.keyframe_every.count() / 4),
          end = int64_t{seconds} * 1000;
  t0 = ThreadCpuMs();
  for (int64_t now = step; now < end; now += step)
    if (auto k = encoder.KeepAlive(now); !k) throw Failure(k.error().message);
  r.keepalive_ms = ThreadCpuMs() - t0;
  r.keepalives = encoder.stats().frames - 1;
  t0 = ThreadCpuMs();
  auto st = encoder.Finish(end);
  r.finish_ms = ThreadCpuMs() - t0;
  if (!st) throw Failure(st.error().message);
  r.keyframes = st->keyframes;
  r.bytes = st->bytes;
  r.video_s = static_cast<double>(end) / 1000.0;
  auto one = recorder::SegmentEncoder::Open(dir + "/one.mp4", content.width(), content.height(), enc);
  if (!one) throw Failure(one.error().message);
  if (auto a = (*one)->AddFrame(px.data(), size_t{content.width()} * 4, 0); !a) throw Failure(a.error().message);
  auto one_st = (*one)->Finish(end);
  if (!one_st) throw Failure(one_st.error().message);
  r.one_picture_bytes = one_st->bytes;
  return r;
}

// ScreenRecorder fed in real time from this thread, the scenes in turn (5 s each).
struct RecorderRun {
  recorder::RecorderStats stats;
  double wall_s = 0, recorder_cpu_ms = 0;
  uint64_t segment_frames = 0, bytes = 0;
  size_t segments = 0;
};
RecorderRun RunRecorder(const ScreenContent& content, int seconds, int fps,
                        const recorder::EncoderSettings& enc, const std::string& dir) {
  RecorderRun r;
  std::mutex mu;
  std::vector<recorder::FinishedSegment> done;
  recorder::RecorderSettings settings{
      .dir = dir, .encoder = enc, .segment_max = 60s, .queue_frames = 2};
  double process0 = ProcessCpuMs(), main0 = ThreadCpuMs();
  auto start = std::chrono::steady_clock::now();
  auto unix_ms = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  {
    recorder::ScreenRecorder rec(
        std::move(settings),
        [&](const recorder::FinishedSegment& s) {
          std::lock_guard lk(mu);
          done.push_back(s);
        },
        0);
    const Scene kScenes[] = {Scene::kScroll, Scene::kDrag, Scene::kType};
    auto interval = std::chrono::microseconds(1'000'000 / fps);
    for (int i = 0; i < seconds * fps; ++i) {
      recorder::ScreenFrame f{content.width(), content.height(),
                              std::vector<uint8_t>(size_t{content.width()} * content.height() * 4),
                              unix_ms()};
      content.Paint(kScenes[(i / (5 * fps)) % 3], i, f.bgrx.data());
      rec.Offer(std::move(f));
      std::this_thread::sleep_until(start + interval * (i + 1));
    }
    r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    r.stats = rec.stats();
    rec.Stop(unix_ms());
  }
  // The process's CPU less this thread's (painting and offering): the recorder's thread.
  r.recorder_cpu_ms = (ProcessCpuMs() - process0) - (ThreadCpuMs() - main0);
  for (const auto& s : done) {
    r.segment_frames += s.frames;
    r.bytes += s.bytes;
  }
  r.segments = done.size();
  return r;
}

std::string Date() {
  auto t = std::time(nullptr);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&t));
  return buf;
}

int Bench(int argc, char** argv) {
  int seconds = 20, recorder_seconds = 30, fps = 15;
  std::string preset = "ultrafast", out = "/tmp/recording_encode_bench.json";
  std::vector<std::string> screens;
  const char* usage =
      "usage: recording_encode_bench [--seconds N] [--recorder-seconds N] [--fps N] [--preset P] "
      "[--screens a.png,b.png] [--out FILE]";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    bool more = i + 1 < argc;
    if (a == "--seconds" && more)
      seconds = std::atoi(argv[++i]);
    else if (a == "--recorder-seconds" && more)
      recorder_seconds = std::atoi(argv[++i]);
    else if (a == "--fps" && more)
      fps = std::atoi(argv[++i]);
    else if (a == "--preset" && more)
      preset = argv[++i];
    else if (a == "--out" && more)
      out = argv[++i];
    else if (a == "--screens" && more) {
      std::istringstream in(argv[++i]);
      for (std::string p; std::getline(in, p, ',');) screens.push_back(p);
    } else
      throw Failure(usage);
  }
  if (seconds < 2 || recorder_seconds < 0 || fps < 1 || fps > 60) throw Failure(usage);
  av_log_set_level(AV_LOG_ERROR);  // not libx264's statistics at every segment's end

  auto content = screens.empty() ? ScreenContent::Drawn(1280, 800) : [&] {
    auto c = ScreenContent::FromScreens(screens);
    if (!c) throw Failure(c.error());
    return std::move(*c);
  }();
  std::string dir = fmt::format("/tmp/deskbox-recording-bench-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() { fs::remove_all(path); }
  } cleanup{dir};

  recorder::EncoderSettings enc;  // as deployed: deskboxd's defaults
  enc.preset = preset;
  enc.max_fps = fps;
  int frames = seconds * fps;
  const Scene kScenes[] = {Scene::kScroll, Scene::kDrag, Scene::kType};
  std::vector<SceneRun> runs;
  std::vector<std::vector<double>> converts;
  for (Scene s : kScenes) {
    runs.push_back(EncodeScene(content, s, frames, fps, enc, dir));
    converts.push_back(ConvertScene(content, s, frames));
  }
  StillRun still = EncodeStill(content, std::max(60, seconds), enc, dir);
  RecorderRun rec;
  if (recorder_seconds > 0) {
    fs::create_directories(dir + "/recorder");
    rec = RunRecorder(content, recorder_seconds, fps, enc, dir + "/recorder");
  }

  // Figures.
  auto share = [&](double ms_per_frame) { return ms_per_frame * fps / 1000.0; };
  std::printf(
      "\nrecording encoder: %ux%u BGRX at %d fps, preset %s, CRF %d, keyframe every %lld ms, "
      "%d s of video per scene, %s content\n",
      content.width(), content.height(), fps, preset.c_str(), enc.crf,
      static_cast<long long>(enc.keyframe_every.count()), seconds,
      screens.empty() ? "drawn" : "screenshot");
  std::printf("%-8s %10s %8s %8s %10s %12s %10s %12s %9s %8s\n", "scene", "CPU/frame", "p50", "p90",
              "keyframe", "core share", "convert", "bytes/frame", "kbit/s", "MiB/h");
  json j_scenes = json::object();
  double motion_ms = 0, motion_convert = 0;
  size_t motion_frames = 0;
  for (size_t k = 0; k < runs.size(); ++k) {
    const auto& r = runs[k];
    std::vector<double> all = r.frame_ms;
    all.insert(all.end(), r.key_ms.begin(), r.key_ms.end());
    double conv = Mean(converts[k]);
    double bpf = static_cast<double>(r.stats.bytes) / static_cast<double>(r.Frames());
    double kbps = static_cast<double>(r.stats.bytes) * 8 / 1000 / r.video_s;
    std::printf("%-8s %7.2f ms %5.2f ms %5.2f ms %7.2f ms %11.1f%% %7.2f ms %12.0f %9.0f %8.0f\n",
                SceneName(r.scene), r.MsPerFrame(), Pct(all, 0.5), Pct(all, 0.9), Mean(r.key_ms),
                100 * share(r.MsPerFrame()), conv, bpf, kbps, MibPerHour(r.stats.bytes, r.video_s));
    j_scenes[SceneName(r.scene)] = {{"frames", r.Frames()},
                                    {"keyframes", r.key_ms.size()},
                                    {"cpu_ms_per_frame", r.MsPerFrame()},
                                    {"cpu_ms_p50", Pct(all, 0.5)},
                                    {"cpu_ms_p90", Pct(all, 0.9)},
                                    {"cpu_ms_max", Pct(all, 1.0)},
                                    {"keyframe_cpu_ms", Mean(r.key_ms)},
                                    {"core_share", share(r.MsPerFrame())},
                                    {"convert_ms_per_frame", conv},
                                    {"encode_over_convert", conv > 0 ? r.MsPerFrame() / conv : 0},
                                    {"bytes", r.stats.bytes},
                                    {"bytes_per_frame", bpf},
                                    {"kbit_per_s", kbps},
                                    {"mib_per_hour", MibPerHour(r.stats.bytes, r.video_s)},
                                    {"video_s", r.video_s},
                                    {"open_ms", r.open_ms},
                                    {"finish_ms", r.finish_ms}};
    if (r.scene != Scene::kType) {
      motion_ms += r.CpuMs();
      motion_convert += std::accumulate(converts[k].begin(), converts[k].end(), 0.0);
      motion_frames += r.Frames();
    }
  }
  double motion_per_frame = motion_ms / static_cast<double>(motion_frames);
  double convert_per_frame = motion_convert / static_cast<double>(motion_frames);
  double motion_share = share(motion_per_frame);
  bool motion_ok = motion_share <= kMotionTarget;
  std::printf(
      "full motion (scroll + drag): %.2f ms of CPU a frame = %.1f%% of a core at %d fps   (target: "
      "<= %.0f%%) %s\n",
      motion_per_frame, 100 * motion_share, fps, 100 * kMotionTarget, motion_ok ? "ok" : "MISSED");
  std::printf(
      "  baseline, colour conversion alone: %.2f ms a frame; encoding / conversion = %.1fx\n",
      convert_per_frame, motion_per_frame / convert_per_frame);
  // A still screen: the keep-alive frames, and one segment opened and finished a minute.
  double still_ms = still.first_ms + still.keepalive_ms;
  double still_share = (still_ms + (still.open_ms + still.finish_ms) * still.video_s / 60.0) /
                       (still.video_s * 1000);
  double still_keepalive_ms =
      still.keepalives > 0 ? still.keepalive_ms / static_cast<double>(still.keepalives) : 0;
  double still_over_one = static_cast<double>(still.bytes) / static_cast<double>(std::max<uint64_t>(1, still.one_picture_bytes));
  bool still_ok = still_over_one <= kStillTarget;
  std::printf(
      "still screen, %.0f s: %llu keyframe(s), %llu keep-alive frames, %.2f ms each; segment open %.1f ms + "
      "finish %.1f ms; %.3f%% of a core, %.1f kbit/s = %.1f MiB/hour; full motion / still = %.0fx\n",
      still.video_s, static_cast<unsigned long long>(still.keyframes),
      static_cast<unsigned long long>(still.keepalives), still_keepalive_ms, still.open_ms, still.finish_ms,
      100 * still_share, static_cast<double>(still.bytes) * 8 / 1000 / still.video_s,
      MibPerHour(still.bytes, still.video_s), still_share > 0 ? motion_share / still_share : 0);
  std::printf(
      "  baseline, the picture alone for %.0f s: %llu bytes; still / alone = %.3fx   (target: <= %.2fx) %s\n",
      still.video_s, static_cast<unsigned long long>(still.one_picture_bytes), still_over_one, kStillTarget,
      still_ok ? "ok" : "MISSED");
  json j = {{"bench", "recording_encode_bench"},
            {"date", Date()},
            {"width", content.width()},
            {"height", content.height()},
            {"fps", fps},
            {"preset", preset},
            {"crf", enc.crf},
            {"keyframe_ms", enc.keyframe_every.count()},
            {"seconds_per_scene", seconds},
            {"content", screens.empty() ? json("drawn") : json(screens)},
            {"scenes", j_scenes},
            {"full_motion",
             {{"cpu_ms_per_frame", motion_per_frame},
              {"core_share", motion_share},
              {"convert_ms_per_frame", convert_per_frame},
              {"encode_over_convert", motion_per_frame / convert_per_frame},
              {"target_core_share", kMotionTarget},
              {"ok", motion_ok}}},
            {"still",
             {{"video_s", still.video_s},
              {"keyframes", still.keyframes},
              {"keepalive_frames", still.keepalives},
              {"keepalive_cpu_ms", still_keepalive_ms},
              {"first_frame_cpu_ms", still.first_ms},
              {"open_ms", still.open_ms},
              {"finish_ms", still.finish_ms},
              {"core_share", still_share},
              {"bytes", still.bytes},
              {"mib_per_hour", MibPerHour(still.bytes, still.video_s)},
              {"one_picture_bytes", still.one_picture_bytes},
              {"over_one_picture", still_over_one},
              {"target_over_one_picture", kStillTarget},
              {"ok", still_ok},
              {"motion_over_still", still_share > 0 ? motion_share / still_share : 0}}}};
  bool delivered_ok = true;
  if (recorder_seconds > 0) {
    double delivered = static_cast<double>(rec.stats.encoded) /
                       static_cast<double>(std::max<uint64_t>(1, rec.stats.offered));
    delivered_ok = delivered >= kDeliveredTarget;
    double rec_share = rec.recorder_cpu_ms / (rec.wall_s * 1000);
    std::printf(
        "ScreenRecorder, frames offered at %d fps for %.1f s (the scenes in turn, 5 s each): %llu "
        "offered, "
        "%llu encoded, %llu dropped = %.2f fps delivered (%.1f%%; target >= %.0f%%) %s\n",
        fps, rec.wall_s, static_cast<unsigned long long>(rec.stats.offered),
        static_cast<unsigned long long>(rec.stats.encoded),
        static_cast<unsigned long long>(rec.stats.dropped),
        static_cast<double>(rec.stats.encoded) / rec.wall_s, 100 * delivered,
        100 * kDeliveredTarget, delivered_ok ? "ok" : "MISSED");
    std::printf(
        "  recorder thread %.1f%% of a core; %zu segment(s), %llu frames in them, %.0f kbit/s\n",
        100 * rec_share, rec.segments, static_cast<unsigned long long>(rec.segment_frames),
        static_cast<double>(rec.bytes) * 8 / 1000 / rec.wall_s);
    j["recorder"] = {{"seconds", rec.wall_s},
                     {"offered", rec.stats.offered},
                     {"encoded", rec.stats.encoded},
                     {"dropped", rec.stats.dropped},
                     {"fps_delivered", static_cast<double>(rec.stats.encoded) / rec.wall_s},
                     {"delivered_share", delivered},
                     {"target_delivered_share", kDeliveredTarget},
                     {"core_share", rec_share},
                     {"segments", rec.segments},
                     {"segment_frames", rec.segment_frames},
                     {"bytes", rec.bytes},
                     {"error", rec.stats.last_error},
                     {"ok", delivered_ok}};
  }
  j["ok"] = motion_ok && delivered_ok && still_ok;
  std::ofstream(out) << j.dump(2) << "\n";
  std::printf("figures: %s\n", out.c_str());
  return motion_ok && delivered_ok && still_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "recording_encode_bench: %s\n", e.what());
    return 2;
  }
}
