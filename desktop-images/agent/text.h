// Text helpers. proto3 `string` fields must hold valid UTF-8 or the peer's parser rejects the
// whole message (and with it the channel), so every text the agent sends goes through
// SanitizeUtf8.
#pragma once

#include <string>
#include <string_view>

#include "agent.pb.h"

namespace deskbox::agent {

bool IsValidUtf8(std::string_view text);
// Replaces every invalid UTF-8 sequence with U+FFFD.
std::string SanitizeUtf8(std::string_view text);
// Sanitizes every string field of a Response in place; returns true if anything changed.
bool SanitizeResponseText(::deskbox::agent::v1::Response& response);
// At most `max_bytes` bytes of `text`, cut on a UTF-8 boundary, with "..." if cut.
std::string Abbreviate(std::string_view text, size_t max_bytes);

}  // namespace deskbox::agent
