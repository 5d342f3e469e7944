#pragma once
// FakeClock: the API's clock for unit tests; time moves only when a test advances it.
#include <atomic>

#include "api/clock.h"

namespace deskbox::api {

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t now_ms = 1'700'000'000'000) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  std::chrono::steady_clock::time_point Steady() const override {
    return std::chrono::steady_clock::time_point(std::chrono::milliseconds(now_ms_.load()));
  }
  // From any thread: the server's thread reads it.
  void Advance(std::chrono::milliseconds d) { now_ms_ += d.count(); }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace deskbox::api
