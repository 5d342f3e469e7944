#pragma once
// TimeoutClock: pauses or stops each running sandbox whose timeout_s has run out (its
// on_timeout), a quarter of a second late at most. A sandbox busy with another lifecycle
// operation is looked at again on the next tick.
#include <boost/asio/steady_timer.hpp>
#include <memory>

#include "api_context.h"

namespace deskbox::api {

class TimeoutClock {
 public:
  explicit TimeoutClock(ApiContext& ctx) : ctx_(ctx), timer_(ctx.executor) {}
  ~TimeoutClock() { Stop(); }
  void Start();
  void Stop();
  // One look at the records: acts on every sandbox due now (tests call it directly).
  boost::asio::awaitable<void> Tick();

 private:
  boost::asio::awaitable<void> Loop(std::shared_ptr<bool> alive);
  ApiContext& ctx_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<bool> alive_;
};

}  // namespace deskbox::api
