// How handlers answer: a callback that sends one Response frame. It returns false when the
// response could not be delivered (the host connection it belongs to is gone), which tells
// streaming handlers to stop. Callable from any thread.
#pragma once

#include <cstdint>
#include <functional>

#include "agent.pb.h"
#include "agent/error.h"

namespace deskbox::agent {

using Reply = std::function<bool(pb::Response)>;

inline pb::Response ErrorResponse(uint64_t id, const AgentError& error) {
  pb::Response response;
  response.set_id(id);
  response.mutable_error()->set_code(error.code);
  response.mutable_error()->set_message(error.message);
  return response;
}

}  // namespace deskbox::agent
