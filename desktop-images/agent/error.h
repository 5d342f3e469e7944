// The agent's error type: what becomes a Response.error on the wire.
#pragma once

#include <string>
#include <string_view>

#include "agent.pb.h"

namespace deskbox::agent {

namespace pb = ::deskbox::agent::v1;

struct AgentError {
  pb::Error::Code code = pb::Error::INTERNAL;
  std::string message;
};

inline AgentError MakeError(pb::Error::Code code, std::string message) {
  return AgentError{code, std::move(message)};
}

// Maps an errno value to the closest Error code; the message is "<context>: <strerror>".
AgentError ErrnoError(int err, std::string_view context);

}  // namespace deskbox::agent
