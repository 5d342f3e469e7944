#pragma once
// JSON rendering of events for the REST API (GET /v1/sandboxes/{id}/events) and deskbox-events:
//
//   {"seq":3,"time":"2025-01-31T12:00:00.123Z","sandbox_id":"sb-…","request_id":"…",
//    "actor":{"kind":"api_key","id":"key_1","remote":"10.0.0.5:51234"},
//    "kind":"action","action":{"type":"click","params":{"x":10,"y":20},"frame_seq":42,
//                              "settled":true,"duration_ms":35}}
//
// The kind's fields sit under a key named after the kind (never flattened: ViewerInput has its
// own "kind"). Every field is present, with its default when unset. Action.params_json is
// embedded as JSON when it parses (and nests at most 64 deep), otherwise as the raw string.
// request_id is omitted when empty; strings with invalid UTF-8 get U+FFFD.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "recorder/event.pb.h"

namespace deskbox::recorder {

nlohmann::json EventToJson(const v1::Event& e);
std::string ToJson(const v1::Event& e);  // one line, no trailing newline

std::string_view KindName(const v1::Event& e);         // "lifecycle", ..., "file"; "none" if unset
std::string_view ActorKindName(v1::Actor::Kind kind);  // "system", "api_key", ...
// RFC 3339 UTC with milliseconds: "2025-01-31T12:00:00.123Z".
std::string FormatTimeRfc3339(int64_t unix_ns);

}  // namespace deskbox::recorder
