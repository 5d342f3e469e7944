#pragma once
// EventSink: where components report what happens in a sandbox (actions, viewer input, CDP calls,
// egress decisions, exec, file transfers, lifecycle). vmhost, vnc-bridge, cdp-proxy, egress and
// api receive an EventSink& through their constructors; production passes a LogEventSink, unit
// tests a FakeEventSink (recorder/fake_event_sink.h).
#include "recorder/event.pb.h"

namespace deskbox::recorder {

using Event = v1::Event;

class EventSink {
 public:
  virtual ~EventSink() = default;

  // Records `e` for e.sandbox_id(). Never blocks on I/O and may be called from any thread
  // (typically an io_context thread). seq is assigned by the sink; time_unix_ns is set to now
  // when it is 0. An event can be dropped (queue full, invalid sandbox id): implementations
  // count drops rather than push back on the caller.
  virtual void Emit(Event e) = 0;

  // Blocks until every event emitted before the call is written and durable (or dropped).
  // For shutdown and tests; do not call it on an io_context thread in a request path.
  virtual void Flush() = 0;
};

}  // namespace deskbox::recorder
