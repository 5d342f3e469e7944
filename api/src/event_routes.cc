#include "event_routes.h"

#include <fmt/format.h>

#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <deque>
#include <optional>

#include "recorder/event_json.h"

namespace deskbox::api {

namespace asio = boost::asio;
using boost::beast::http::verb;
using nlohmann::json;
using namespace std::chrono_literals;
using vmhost::SandboxState;

EventRoutes::~EventRoutes() {
  *alive_ = false;
  flush_pool_.join();
}

void EventRoutes::Register(Router& router) {
  router.Add({.method = verb::get,
              .pattern = "/v1/sandboxes/{id}/events",
              .access = Access::Tokens({Scope::kView, Scope::kControl, Scope::kReplay}).InQuery(),
              .handler = [this](Call& c) { return GetEvents(c); }});
}

asio::awaitable<void> EventRoutes::Flush() {
  // Flush blocks until the writer thread has the events on disk: not on the io_context thread.
  co_await asio::post(flush_pool_, asio::use_awaitable);
  ctx_.events.Flush();
  co_await asio::post(ctx_.executor, asio::use_awaitable);
}

Reply EventRoutes::GetEvents(Call& c) {
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  uint64_t since = 0, limit = 1000;
  bool follow = false;
  for (const auto& [k, v] : c.ex.query()) {
    auto number = [&](uint64_t min, uint64_t max) -> std::optional<uint64_t> {
      if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos)
        return std::nullopt;
      uint64_t n = std::stoull(v);
      if (n < min || n > max) return std::nullopt;
      return n;
    };
    if (k == "token") continue;  // the credential (the replay page's calls)
    if (k == "since") {
      auto n = number(0, UINT64_MAX / 2);
      if (!n)
        co_return Error(400, "invalid_request", "since must be a sequence number (0 or more)");
      since = *n;
    } else if (k == "limit") {
      auto n = number(1, 10000);
      if (!n) co_return Error(400, "invalid_request", "limit must be between 1 and 10000");
      limit = *n;
    } else if (k == "follow") {
      if (v != "1" && v != "0" && v != "true" && v != "false")
        co_return Error(400, "invalid_request", "follow must be 1 or 0");
      follow = v == "1" || v == "true";
    } else {
      co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
    }
  }
  std::string path = ctx_.events.LogPath(c.id);
  if (!follow) {
    co_await Flush();
    json list = json::array();
    uint64_t next = since;
    auto reader = recorder::EventLogReader::Open(path, {since, true});
    if (!reader && reader.error().code != recorder::EventLogError::Code::kNotFound)
      co_return Error(500, "internal", "event log: " + reader.error().message);
    if (reader) {
      while (list.size() < limit) {
        auto e = (*reader)->Next();
        if (!e) co_return Error(500, "internal", "event log: " + e.error().message);
        if (!*e) break;
        next = (*e)->seq();
        list.push_back(recorder::EventToJson(**e));
      }
    }
    co_return Json(200, {{"events", list}, {"next_since", next}});
  }
  // Follow: subscribe first, then read the file, then pass on what the subscription brings,
  // skipping what the file already gave. A seq gap means events were skipped: re-read the file.
  struct Queue {
    std::deque<recorder::Event> events;
    asio::steady_timer wake;
    explicit Queue(asio::any_io_executor ex) : wake(ex) {}
  };
  auto q = std::make_shared<Queue>(ctx_.executor);
  HttpResponse res;
  res.content_type = "application/x-ndjson";
  std::string id = c.id;
  auto alive = alive_;
  res.stream = [this, q, since, path, id, alive](ChunkWriter& w) -> asio::awaitable<void> {
    // Subscribed here, once the head is out, so that a client gone before then leaves nothing.
    uint64_t sub = ctx_.events.Subscribe(id, ctx_.executor, [q](const recorder::Event& e) {
      if (q->events.size() < 4096) q->events.push_back(e);
      q->wake.cancel();
    });
    uint64_t last = since;
    auto read_file = [&]() -> asio::awaitable<bool> {
      co_await Flush();
      auto reader = recorder::EventLogReader::Open(path, {last, true});
      if (!reader) co_return reader.error().code == recorder::EventLogError::Code::kNotFound;
      for (;;) {
        auto e = (*reader)->Next();
        if (!e || !*e) co_return static_cast<bool>(e);
        last = (*e)->seq();
        if (!(co_await w.Write(recorder::ToJson(**e) + "\n"))) co_return false;
      }
    };
    bool ok = co_await read_file();
    std::optional<std::chrono::steady_clock::time_point> tail_until;
    while (ok && *alive && !w.ClientGone()) {
      while (ok && !q->events.empty()) {
        recorder::Event e = std::move(q->events.front());
        q->events.pop_front();
        if (e.seq() <= last) continue;
        if (e.seq() != last + 1) {
          ok = co_await read_file();
          continue;
        }
        last = e.seq();
        ok = co_await w.Write(recorder::ToJson(e) + "\n");
      }
      if (!ok) break;
      const SandboxRecord* r = ctx_.sandboxes.Find(id);
      bool ended = !r || r->state == SandboxState::kStopped || r->state == SandboxState::kFailed;
      bool waiting_tail = false;
      if (ended) {
        if (!tail_until) tail_until = std::chrono::steady_clock::now() + kFollowTail;
        // Events still to come (the recording's last segment): wait for them, not for ever.
        waiting_tail = still_writing_ && still_writing_(id) && std::chrono::steady_clock::now() < *tail_until;
        if (!waiting_tail) {
          // Its last events may still be on their way to the file.
          ok = co_await read_file();
          if (q->events.empty()) break;
          continue;
        }
      }
      q->wake.expires_after(waiting_tail ? std::chrono::milliseconds(100) : std::chrono::milliseconds(1000));
      boost::system::error_code ec;
      co_await q->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    ctx_.events.Unsubscribe(sub);
  };
  co_return res;
}

}  // namespace deskbox::api
