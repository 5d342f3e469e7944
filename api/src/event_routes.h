#pragma once
// EventRoutes: GET /v1/sandboxes/{id}/events — a sandbox's timeline as a page, or followed as
// newline-delimited JSON while the sandbox lives. Also flushes the event log for shutdown.
#include <boost/asio/thread_pool.hpp>
#include <memory>

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

 private:
  Reply GetEvents(Call& c);

  ApiContext& ctx_;
  boost::asio::thread_pool flush_pool_{1};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deskbox::api
