#pragma once
// RecordingRoutes: the screen recording of every sandbox (docs/recording.md) — a ScreenRecorder
// fed by the sandbox's screen mirror while it runs, each segment chained into the event log —
// and the routes that read it: the recording's segments, the joined MP4, single segments, the
// log's head and verification, the replay page; deletion, retention and the disk quota.
//
// Threads: the io_context's. Blocking work (stopping an encoder, hashing and scanning files,
// removing them) runs on a pool of one thread, in order.
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "api_context.h"
#include "recorder/recording_check.h"
#include "recorder/screen_recorder.h"
#include "screen_mirrors.h"

namespace deskbox::api {

// Whether files of sandbox `id`'s recording are still on disk (a replay token can be minted
// for a deleted sandbox while they are).
bool RecordingRetained(const DaemonConfig& config, const std::string& id);

class RecordingRoutes final : public SandboxStateListener {
 public:
  RecordingRoutes(ApiContext& ctx, ScreenMirrors& mirrors);
  ~RecordingRoutes();
  void Register(Router& router);
  void OnSandboxState(const SandboxRecord& r, vmhost::SandboxState from) override;

  // Starts the retention and quota sweep (after the registry has loaded).
  void Start();
  // Ends every recording's segment and waits until their events are emitted.
  boost::asio::awaitable<void> Shutdown();

  struct Totals {
    uint64_t recording = 0;  // sandboxes being recorded now
    uint64_t bytes = 0;      // on disk, all recordings (as of the last sweep, plus segments since)
    uint64_t failures = 0;   // recordings stopped by a failure (disk full, quota, encoder)
    uint64_t dropped_frames = 0;
    uint64_t segments = 0;
  };
  Totals totals() const;
  // Whether a segment of sandbox `id`'s recording is still being finished: its event is still to
  // come (a follower of the sandbox's events waits for it).
  bool Finishing(const std::string& id) const { return finishing_.contains(id); }

 private:
  struct Live;
  struct Recording;

  Reply GetRecording(Call& c);
  Reply GetJoined(Call& c);
  Reply GetSegment(Call& c);
  Reply DeleteRecording(Call& c);
  Reply GetHead(Call& c);
  Reply Verify(Call& c);
  Reply ReplayPage(Call& c);
  // What a route reading sandbox `id`'s recording answers instead (404, 503), once its index is
  // loaded; nullopt to go on.
  boost::asio::awaitable<std::optional<HttpResponse>> Prepare(const std::string& id);

  std::string DirOf(const std::string& id) const;
  Recording& RecordingOf(const std::string& id);
  // Reads the sandbox's log once (what was emitted meanwhile merges in).
  boost::asio::awaitable<void> LoadIndex(const std::string& id);
  // Emits a recording event and applies it to the index.
  void Emit(const std::string& id, recorder::v1::Recording r);
  boost::asio::awaitable<void> StartRecorder(std::string id);
  // Ends the sandbox's recorder (its last segment is finished on the pool).
  void StopRecorder(const std::string& id, int64_t end_ms);
  // Recording of `id` stopped for `why`: an event, a metric, the recorder gone.
  void Fail(const std::string& id, const std::string& why);
  void OnUpdate(const std::string& id);
  // Offers the screen now, or when the frame interval since the last offer ends.
  void Pace(const std::string& id);
  void Offer(const std::string& id);
  void OnSegment(const std::string& id, const recorder::FinishedSegment& s);
  boost::asio::awaitable<void> Sweep();
  boost::asio::awaitable<void> SweepLoop();
  // Removes segment files of `id` below `below` (on the pool).
  boost::asio::awaitable<uint64_t> RemoveBelow(const std::string& id, uint32_t below);
  // Removes an ended sandbox's whole recording, and says so in its log.
  boost::asio::awaitable<void> RemoveAll(const std::string& id, const std::string& why);
  // Runs `f` on the pool and resumes on the io_context. `f` is a named object of the caller's:
  // GCC 12 destroys some temporaries of a co_await expression twice, so none is made there.
  template <typename F>
  auto OnPool(F& f) -> boost::asio::awaitable<decltype(f())>;

  ApiContext& ctx_;
  ScreenMirrors& mirrors_;
  boost::asio::thread_pool pool_{1};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::map<std::string, std::unique_ptr<Live>> live_;
  std::map<std::string, int> finishing_;  // recorders stopped whose last segment is being finished
  std::map<std::string, std::unique_ptr<Recording>> recordings_;
  boost::asio::steady_timer sweep_timer_;
  Totals totals_;
  bool over_quota_ = false;
  bool stopping_ = false;
};

}  // namespace deskbox::api
