#pragma once
// FakeEventSink: collects emitted events in memory, for other components' unit tests.
//
//   recorder::FakeEventSink events;
//   Thing thing(..., events);
//   ...
//   ASSERT_EQ(events.size(), 1u);
//   EXPECT_EQ(events.events()[0].cdp().method(), "Page.navigate");
#include <mutex>
#include <vector>

#include "recorder/event_sink.h"

namespace deskbox::recorder {

class FakeEventSink final : public EventSink {
 public:
  // Stores the event as given (no seq or time is assigned). Thread-safe.
  void Emit(Event e) override {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  void Flush() override {}

  std::vector<Event> events() const {
    std::lock_guard lock(mu_);
    return events_;
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return events_.size();
  }
  void Clear() {
    std::lock_guard lock(mu_);
    events_.clear();
  }

 private:
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

}  // namespace deskbox::recorder
