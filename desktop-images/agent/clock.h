// Time, injected so tests can run waits (ready polling, abandoned writes) on a simulated clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace deskbox::agent {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t MonotonicNs() = 0;
  virtual int64_t RealtimeNs() = 0;
  virtual void SleepFor(std::chrono::milliseconds duration) = 0;
};

class SystemClock final : public Clock {
 public:
  int64_t MonotonicNs() override;
  int64_t RealtimeNs() override;
  void SleepFor(std::chrono::milliseconds duration) override;
};

}  // namespace deskbox::agent
