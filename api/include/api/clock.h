#pragma once
// Clock: the time the API reads, injected so that timeouts, token expiry and rate limits are
// tested by advancing a fake clock rather than by sleeping.
#include <chrono>
#include <cstdint>

namespace deskbox::api {

class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock time, Unix milliseconds (records, tokens, events).
  virtual int64_t NowMs() const = 0;
  // Monotonic time (rate limits, durations).
  virtual std::chrono::steady_clock::time_point Steady() const = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  std::chrono::steady_clock::time_point Steady() const override {
    return std::chrono::steady_clock::now();
  }
};

}  // namespace deskbox::api
