#pragma once
// EventRoutes: GET /v1/sandboxes/{id}/events — a sandbox's timeline as a page, or followed as
// newline-delimited JSON while the sandbox lives. Also flushes the event log for shutdown.
#include <boost/asio/thread_pool.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "api_context.h"

namespace deskbox::api {

class EventRoutes {
 public:
  explicit EventRoutes(ApiContext& ctx) : ctx_(ctx) {}
  ~EventRoutes();
  void Register(Router& router);
  // Waits until every event emitted so far is on disk, off the io_context thread.
  boost::asio::awaitable<void> Flush();
  // Ends followers (shutdown).
  void Stop() { *alive_ = false; }
  // Whether events of sandbox `id` are still to come after it ended (its recording's last
  // segment being finished): a follower waits for them, up to kFollowTail, before it ends.
  void SetStillWriting(std::function<bool(const std::string&)> f) { still_writing_ = std::move(f); }
  static constexpr std::chrono::seconds kFollowTail{30};

 private:
  Reply GetEvents(Call& c);

  ApiContext& ctx_;
  boost::asio::thread_pool flush_pool_{1};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  std::function<bool(const std::string&)> still_writing_;
};

}  // namespace deskbox::api
