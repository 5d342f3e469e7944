#include "recorder/log_event_sink.h"

#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <filesystem>
#include <system_error>

#include "common/log.h"

namespace deskbox::recorder {
namespace {
constexpr char kSinkLog[] = "recorder";
// A log that could not be opened (corrupt, unreadable) is tried again after this long; events
// for it meanwhile count as write errors.
constexpr auto kReopenBackoff = std::chrono::seconds(10);

int64_t SystemNowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
}  // namespace

struct LogEventSink::Subscriber {
  uint64_t id = 0;
  std::string sandbox_id;
  boost::asio::any_io_executor executor;
  EventCallback callback;
  std::atomic<bool> active{true};
  std::atomic<size_t> pending{0};
};

std::expected<std::unique_ptr<LogEventSink>, EventLogError> LogEventSink::Create(
    LogEventSinkOptions options) {
  if (options.dir.empty())
    return std::unexpected(
        EventLogError{EventLogError::Code::kInvalidArgument, "event log directory is not set"});
  std::error_code ec;
  std::filesystem::create_directories(options.dir, ec);
  if (ec)
    return std::unexpected(EventLogError{
        EventLogError::Code::kIo, fmt::format("creating {}: {}", options.dir, ec.message())});
  if (options.queue_capacity == 0) options.queue_capacity = 1;
  if (options.max_open_logs == 0) options.max_open_logs = 1;
  if (!options.now_unix_ns) options.now_unix_ns = SystemNowUnixNs;
  return std::unique_ptr<LogEventSink>(new LogEventSink(std::move(options)));
}

LogEventSink::LogEventSink(LogEventSinkOptions options) : options_(std::move(options)) {
  queue_.reserve(std::min<size_t>(options_.queue_capacity, 1024));
  thread_ = std::thread([this] { Run(); });
}

LogEventSink::~LogEventSink() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

std::string LogEventSink::LogPath(std::string_view sandbox_id) const {
  return fmt::format("{}/{}{}", options_.dir, sandbox_id, kEventLogSuffix);
}

void LogEventSink::Emit(Event e) {
  if (!IsValidSandboxId(e.sandbox_id())) {
    dropped_invalid_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (e.time_unix_ns() == 0) e.set_time_unix_ns(options_.now_unix_ns());
  e.clear_seq();  // the writer assigns it: the log is the only authority on seq
  const size_t bytes = e.ByteSizeLong();
  if (bytes + 16 > kMaxRecordPayload) {  // + room for the seq the writer adds
    dropped_too_large_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (stopping_ || queue_.size() >= options_.queue_capacity ||
        queue_bytes_ + bytes > options_.queue_max_bytes) {
      dropped_queue_full_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(e));
    queue_bytes_ += bytes;
    ++accepted_;
  }
  cv_.notify_one();
}

void LogEventSink::Flush() {
  std::unique_lock lock(mu_);
  const uint64_t target = accepted_;
  flush_requested_ = true;
  cv_.notify_one();
  done_cv_.wait(lock, [&] { return durable_ >= target; });
}

uint64_t LogEventSink::Subscribe(std::string sandbox_id, boost::asio::any_io_executor executor,
                                 EventCallback callback) {
  auto sub = std::make_shared<Subscriber>();
  sub->sandbox_id = std::move(sandbox_id);
  sub->executor = std::move(executor);
  sub->callback = std::move(callback);
  std::lock_guard lock(subs_mu_);
  sub->id = next_sub_id_++;
  subs_by_sandbox_[sub->sandbox_id].push_back(sub);
  subs_by_id_[sub->id] = sub;
  subscriber_count_.fetch_add(1);
  return sub->id;
}

void LogEventSink::Unsubscribe(uint64_t id) {
  std::lock_guard lock(subs_mu_);
  auto it = subs_by_id_.find(id);
  if (it == subs_by_id_.end()) return;
  auto sub = it->second;
  sub->active = false;
  subs_by_id_.erase(it);
  auto& list = subs_by_sandbox_[sub->sandbox_id];
  std::erase(list, sub);
  if (list.empty()) subs_by_sandbox_.erase(sub->sandbox_id);
  subscriber_count_.fetch_sub(1);
}

EventSinkStats LogEventSink::stats() const {
  EventSinkStats s;
  {
    std::lock_guard lock(mu_);
    s.accepted = accepted_;
    s.queue_depth = queue_.size();
  }
  s.written = written_.load();
  s.dropped_queue_full = dropped_queue_full_.load();
  s.dropped_invalid = dropped_invalid_.load();
  s.dropped_too_large = dropped_too_large_.load();
  s.write_errors = write_errors_.load();
  s.subscriber_drops = subscriber_drops_.load();
  return s;
}

// --- writer thread --------------------------------------------------------------------------

void LogEventSink::Run() {
  std::vector<Event> batch;
  std::vector<std::shared_ptr<const Event>> written;
  for (;;) {
    bool sync_all = false;
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      auto ready = [&] { return !queue_.empty() || flush_requested_ || stopping_; };
      if (options_.sync == SyncPolicy::kInterval && AnyDirty())
        cv_.wait_for(lock, options_.sync_interval, ready);  // wake up to sync in time
      else
        cv_.wait(lock, ready);
      batch.swap(queue_);
      queue_bytes_ = 0;
      sync_all = flush_requested_ || stopping_;
      flush_requested_ = false;
      stop = stopping_;
    }
    for (auto& e : batch) WriteOne(std::move(e), written);
    const uint64_t handled = batch.size();
    batch.clear();
    SyncLogs(sync_all);
    CloseDoneLogs();
    Publish(written);
    written.clear();
    {
      std::lock_guard lock(mu_);
      completed_ += handled;
      if (sync_all || options_.sync == SyncPolicy::kEveryRecord) durable_ = completed_;
    }
    done_cv_.notify_all();
    if (stop) {
      std::lock_guard lock(mu_);
      if (queue_.empty()) break;
    }
  }
  logs_.clear();  // each writer syncs as it closes
}

void LogEventSink::WriteOne(Event e, std::vector<std::shared_ptr<const Event>>& written) {
  if (options_.before_append) options_.before_append(e);
  const std::string sandbox_id = e.sandbox_id();
  EventLogWriter* w = WriterFor(sandbox_id);
  if (!w) {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto r = w->Append(e);
  if (!r) {
    write_errors_.fetch_add(1, std::memory_order_relaxed);
    log::Error(kSinkLog, "dropping an event of {}: {}", sandbox_id, r.error().message);
    // After an I/O error the writer refuses more; reopening re-verifies the file.
    if (r.error().code == EventLogError::Code::kIo) CloseLog(sandbox_id);
    return;
  }
  written_.fetch_add(1, std::memory_order_relaxed);
  const std::string& to = e.has_lifecycle() ? e.lifecycle().to_state() : std::string();
  const bool done = to == "destroyed" || to == "stopped" || to == "failed";
  if (subscriber_count_.load(std::memory_order_relaxed) > 0)
    written.push_back(std::make_shared<const Event>(std::move(e)));
  // The sandbox is done: free the descriptor now (a later event reopens the log), and again
  // after late events (connections ending, sessions closing) for a little while.
  if (done) {
    CloseLog(sandbox_id);
    done_logs_[sandbox_id] = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  }
}

EventLogWriter* LogEventSink::WriterFor(const std::string& sandbox_id) {
  if (auto it = logs_.find(sandbox_id); it != logs_.end()) {
    it->second.last_use = ++use_clock_;
    return it->second.writer.get();
  }
  const auto now = std::chrono::steady_clock::now();
  if (auto f = open_failed_.find(sandbox_id); f != open_failed_.end()) {
    if (now - f->second < kReopenBackoff) return nullptr;
    open_failed_.erase(f);
  }
  if (logs_.size() >= options_.max_open_logs) {
    auto lru = logs_.begin();
    for (auto it = logs_.begin(); it != logs_.end(); ++it)
      if (it->second.last_use < lru->second.last_use) lru = it;
    CloseLog(lru->first);
  }
  auto w = EventLogWriter::Open(LogPath(sandbox_id), sandbox_id,
                                {.sync = options_.sync, .sync_interval = options_.sync_interval});
  if (!w) {
    log::Error(kSinkLog, "cannot open the event log of {}: {}", sandbox_id, w.error().message);
    open_failed_[sandbox_id] = now;
    return nullptr;
  }
  auto& slot = logs_[sandbox_id];
  slot.writer = std::move(*w);
  slot.last_use = ++use_clock_;
  return slot.writer.get();
}

void LogEventSink::CloseDoneLogs() {
  auto now = std::chrono::steady_clock::now();
  for (auto it = done_logs_.begin(); it != done_logs_.end();) {
    CloseLog(it->first);
    it = it->second <= now ? done_logs_.erase(it) : std::next(it);
  }
}

void LogEventSink::CloseLog(const std::string& sandbox_id) {
  auto it = logs_.find(sandbox_id);
  if (it == logs_.end()) return;
  if (auto s = it->second.writer->Sync(); !s)
    log::Error(kSinkLog, "closing the event log of {}: {}", sandbox_id, s.error().message);
  logs_.erase(it);
}

bool LogEventSink::AnyDirty() const {
  for (const auto& [id, log] : logs_)
    if (log.writer->dirty()) return true;
  return false;
}

void LogEventSink::SyncLogs(bool all) {
  std::vector<std::string> failed;
  for (auto& [id, log] : logs_) {
    auto s = all ? log.writer->Sync() : log.writer->SyncIfDue();
    if (!s) {
      log::Error(kSinkLog, "syncing the event log of {}: {}", id, s.error().message);
      failed.push_back(id);
    }
  }
  for (const auto& id : failed) logs_.erase(id);
}

void LogEventSink::Publish(const std::vector<std::shared_ptr<const Event>>& written) {
  if (written.empty()) return;
  std::vector<std::pair<std::shared_ptr<Subscriber>, std::shared_ptr<const Event>>> deliveries;
  {
    std::lock_guard lock(subs_mu_);
    auto all = subs_by_sandbox_.find("");
    for (const auto& ev : written) {
      if (auto it = subs_by_sandbox_.find(ev->sandbox_id()); it != subs_by_sandbox_.end())
        for (const auto& sub : it->second) deliveries.emplace_back(sub, ev);
      if (all != subs_by_sandbox_.end())
        for (const auto& sub : all->second) deliveries.emplace_back(sub, ev);
    }
  }
  for (auto& [sub, ev] : deliveries) {
    if (!sub->active.load()) continue;
    if (sub->pending.load() >= options_.subscriber_max_pending) {
      subscriber_drops_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    sub->pending.fetch_add(1);
    boost::asio::post(sub->executor, [sub, ev] {
      sub->pending.fetch_sub(1);
      if (sub->active.load()) sub->callback(*ev);
    });
  }
}

}  // namespace deskbox::recorder
