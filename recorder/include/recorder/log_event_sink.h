#pragma once
// LogEventSink: the production EventSink. Emit() puts the event on a bounded queue and returns;
// one writer thread appends queued events to <dir>/<sandbox_id>.events (an EventLogWriter per
// sandbox, opened on first use, at most max_open_logs at once, closed when the sandbox's
// lifecycle ends), then posts each written event to the subscribers of its sandbox on their own
// executors.
//
// Threads: callers of Emit/Flush/Subscribe/Unsubscribe (any, usually io_context threads), the
// writer thread (all file I/O), and the subscribers' executors (callbacks). The queue lock is
// held only to push or to swap the whole queue out; callbacks are posted with no lock held.
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "recorder/event_log.h"
#include "recorder/event_sink.h"

namespace deskbox::recorder {

struct LogEventSinkOptions {
  std::string dir;                    // state directory; created if missing
  size_t queue_capacity = 8192;       // events waiting for the writer; more are dropped
  size_t queue_max_bytes = 64 << 20;  // and their serialized size, so memory stays bounded
  SyncPolicy sync = SyncPolicy::kInterval;
  std::chrono::milliseconds sync_interval{100};  // kInterval: at most this much is lost in a crash
  size_t max_open_logs = 128;                    // least recently used logs are closed beyond this
  size_t subscriber_max_pending = 4096;          // posted, not yet run callbacks per subscriber
  // Wall clock for events emitted without a time (ns since the epoch). Default: system_clock.
  std::function<int64_t()> now_unix_ns;
  // Test hook, run on the writer thread before each append (e.g. to slow the writer down).
  std::function<void(const Event&)> before_append;
};

struct EventSinkStats {
  uint64_t accepted = 0;            // queued by Emit
  uint64_t written = 0;             // appended to a log
  uint64_t dropped_queue_full = 0;  // queue at capacity (or the sink shutting down)
  uint64_t dropped_invalid = 0;     // sandbox id missing or not valid as a file name
  uint64_t dropped_too_large = 0;   // over kMaxRecordPayload
  uint64_t write_errors = 0;        // the log could not be opened or appended to
  uint64_t subscriber_drops = 0;    // a subscriber had subscriber_max_pending callbacks queued
  size_t queue_depth = 0;
};

using EventCallback = std::function<void(const Event&)>;

class LogEventSink final : public EventSink {
 public:
  static std::expected<std::unique_ptr<LogEventSink>, EventLogError> Create(
      LogEventSinkOptions options);
  // Writes what is queued, syncs and closes every log, stops the writer thread. Events emitted
  // meanwhile are dropped.
  ~LogEventSink() override;

  void Emit(Event e) override;
  void Flush() override;

  // Calls `callback` on `executor` with each event of `sandbox_id` ("" = every sandbox) once
  // it is written, in seq order. Events written before Subscribe returns are not delivered: to
  // follow a log, subscribe first, then read the file (EventLogReader) and skip seqs already
  // seen. If the subscriber falls behind by subscriber_max_pending events, later ones are
  // skipped (a seq gap tells it to re-read the file). Returns an id for Unsubscribe.
  uint64_t Subscribe(std::string sandbox_id, boost::asio::any_io_executor executor,
                     EventCallback callback);
  // After this returns, `callback` is not called again from posts that have not run yet —
  // provided Unsubscribe runs on the subscriber's executor (or the callback checks itself).
  void Unsubscribe(uint64_t id);

  EventSinkStats stats() const;
  uint64_t dropped() const { return dropped_queue_full_.load(); }  // queue-full drops
  std::string LogPath(std::string_view sandbox_id) const;

 private:
  struct Subscriber;
  struct OpenLog {
    std::unique_ptr<EventLogWriter> writer;
    uint64_t last_use = 0;
  };

  explicit LogEventSink(LogEventSinkOptions options);
  void Run();  // the writer thread
  void WriteOne(Event e, std::vector<std::shared_ptr<const Event>>& written);
  EventLogWriter* WriterFor(const std::string& sandbox_id);
  void CloseLog(const std::string& sandbox_id);
  void CloseDoneLogs();
  bool AnyDirty() const;
  void SyncLogs(bool all);
  void Publish(const std::vector<std::shared_ptr<const Event>>& written);

  const LogEventSinkOptions options_;

  // Queue, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;       // writer waits: events, flush or stop
  std::condition_variable done_cv_;  // Flush waits: durable_
  std::vector<Event> queue_;
  size_t queue_bytes_ = 0;
  uint64_t accepted_ = 0;   // events ever queued
  uint64_t completed_ = 0;  // of those, handled by the writer (written or failed)
  uint64_t durable_ = 0;    // of those, handled and synced
  bool flush_requested_ = false;
  bool stopping_ = false;

  // Writer thread only: sandboxes whose lifecycle ended (destroyed, stopped, failed) and until
  // when their logs are closed again after each batch (late events reopen them).
  std::unordered_map<std::string, std::chrono::steady_clock::time_point> done_logs_;

  std::atomic<uint64_t> written_{0};
  std::atomic<uint64_t> dropped_queue_full_{0};
  std::atomic<uint64_t> dropped_invalid_{0};
  std::atomic<uint64_t> dropped_too_large_{0};
  std::atomic<uint64_t> write_errors_{0};
  std::atomic<uint64_t> subscriber_drops_{0};

  // Subscribers, guarded by subs_mu_ (never held while calling or posting).
  std::mutex subs_mu_;
  std::unordered_map<std::string, std::vector<std::shared_ptr<Subscriber>>> subs_by_sandbox_;
  std::unordered_map<uint64_t, std::shared_ptr<Subscriber>> subs_by_id_;
  uint64_t next_sub_id_ = 1;
  std::atomic<size_t> subscriber_count_{0};

  // Writer thread only.
  std::map<std::string, OpenLog> logs_;
  std::map<std::string, std::chrono::steady_clock::time_point> open_failed_;
  uint64_t use_clock_ = 0;

  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace deskbox::recorder
