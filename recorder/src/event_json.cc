#include "recorder/event_json.h"

#include <fmt/format.h>

#include <ctime>

#include "recorder/event_log.h"  // SanitizeUtf8

namespace deskbox::recorder {
namespace {
constexpr int kMaxParamsDepth = 64;

// Action.params_json as JSON if it parses (bounded nesting, so that rendering and the caller's
// dump cannot recurse deeply), else the raw string: nothing recorded is ever hidden.
template <typename J>
J Params(const std::string& raw) {
  if (raw.empty()) return J::object();
  bool too_deep = false;
  typename J::parser_callback_t limit = [&](int depth, nlohmann::json::parse_event_t, J&) {
    if (depth > kMaxParamsDepth) too_deep = true;
    return !too_deep;
  };
  J parsed = J::parse(raw, limit, /*allow_exceptions=*/false);
  if (too_deep || parsed.is_discarded()) return J(raw);
  return parsed;
}

template <typename J>
J Build(const v1::Event& in) {
  v1::Event e = in;
  SanitizeUtf8(e);
  J j = J::object();
  j["seq"] = e.seq();
  j["time"] = FormatTimeRfc3339(e.time_unix_ns());
  j["sandbox_id"] = e.sandbox_id();
  if (!e.request_id().empty()) j["request_id"] = e.request_id();
  j["actor"] = {{"kind", ActorKindName(e.actor().kind())},
                {"id", e.actor().id()},
                {"remote", e.actor().remote()}};
  std::string_view kind = KindName(e);
  j["kind"] = kind;
  J k = J::object();
  switch (e.kind_case()) {
    case v1::Event::kLifecycle: {
      const auto& x = e.lifecycle();
      k["from_state"] = x.from_state();
      k["to_state"] = x.to_state();
      k["reason"] = x.reason();
      k["detail"] = x.detail();
      break;
    }
    case v1::Event::kAction: {
      const auto& x = e.action();
      k["type"] = x.type();
      k["params"] = Params<J>(x.params_json());
      k["frame_seq"] = x.frame_seq();
      k["settled"] = x.settled();
      k["duration_ms"] = x.duration_ms();
      break;
    }
    case v1::Event::kViewerInput: {
      const auto& x = e.viewer_input();
      k["kind"] = x.kind();
      k["dropped"] = x.dropped();
      k["count"] = x.count();
      break;
    }
    case v1::Event::kCdp: {
      const auto& x = e.cdp();
      k["method"] = x.method();
      k["session_id"] = x.session_id();
      k["notable"] = x.notable();
      k["note"] = x.note();
      break;
    }
    case v1::Event::kEgress: {
      const auto& x = e.egress();
      k["protocol"] = x.protocol();
      k["name"] = x.name();
      k["address"] = x.address();
      k["port"] = x.port();
      k["allowed"] = x.allowed();
      k["rule"] = x.rule();
      k["reason"] = x.reason();
      k["bytes_up"] = x.bytes_up();
      k["bytes_down"] = x.bytes_down();
      k["duration_ms"] = x.duration_ms();
      k["query_type"] = x.query_type();
      k["phase"] = x.phase();
      break;
    }
    case v1::Event::kExec: {
      const auto& x = e.exec();
      J argv = J::array();
      for (const auto& a : x.argv()) argv.push_back(a);
      k["argv"] = std::move(argv);
      k["shell"] = x.shell();
      k["exit_code"] = x.exit_code();
      k["signal"] = x.signal();
      k["duration_ms"] = x.duration_ms();
      k["timed_out"] = x.timed_out();
      k["stdout_bytes"] = x.stdout_bytes();
      k["stderr_bytes"] = x.stderr_bytes();
      break;
    }
    case v1::Event::kFile: {
      const auto& x = e.file();
      k["direction"] = x.direction();
      k["path"] = x.path();
      k["bytes"] = x.bytes();
      k["ok"] = x.ok();
      k["error"] = x.error();
      break;
    }
    case v1::Event::kRecording: {
      const auto& x = e.recording();
      k["phase"] = x.phase();
      k["index"] = x.index();
      k["file"] = x.file();
      if (x.start_unix_ms()) k["start"] = FormatTimeRfc3339(x.start_unix_ms() * 1000000);
      if (x.end_unix_ms()) k["end"] = FormatTimeRfc3339(x.end_unix_ms() * 1000000);
      k["start_ms"] = x.start_unix_ms();
      k["end_ms"] = x.end_unix_ms();
      k["bytes"] = x.bytes();
      k["sha256"] = x.sha256();
      k["width"] = x.width();
      k["height"] = x.height();
      k["frames"] = x.frames();
      k["truncated"] = x.truncated();
      k["detail"] = x.detail();
      k["dropped_frames"] = x.dropped_frames();
      break;
    }
    case v1::Event::KIND_NOT_SET:
      return j;
  }
  j[std::string(kind)] = std::move(k);
  return j;
}
}  // namespace

std::string_view KindName(const v1::Event& e) {
  switch (e.kind_case()) {
    case v1::Event::kLifecycle:
      return "lifecycle";
    case v1::Event::kAction:
      return "action";
    case v1::Event::kViewerInput:
      return "viewer_input";
    case v1::Event::kCdp:
      return "cdp";
    case v1::Event::kEgress:
      return "egress";
    case v1::Event::kExec:
      return "exec";
    case v1::Event::kFile:
      return "file";
    case v1::Event::kRecording:
      return "recording";
    case v1::Event::KIND_NOT_SET:
      break;
  }
  return "none";
}

std::string_view ActorKindName(v1::Actor::Kind kind) {
  switch (kind) {
    case v1::Actor::SYSTEM:
      return "system";
    case v1::Actor::API_KEY:
      return "api_key";
    case v1::Actor::TOKEN:
      return "token";
    case v1::Actor::AGENT:
      return "agent";
    case v1::Actor::HUMAN:
      return "human";
    default:
      break;  // a value from a newer writer
  }
  return "unknown";
}

std::string FormatTimeRfc3339(int64_t unix_ns) {
  constexpr int64_t kNsPerS = 1'000'000'000;
  int64_t s = unix_ns / kNsPerS;
  int64_t rem = unix_ns % kNsPerS;
  if (rem < 0) {
    rem += kNsPerS;
    s -= 1;
  }
  std::time_t t = static_cast<std::time_t>(s);
  std::tm tm{};
  if (!gmtime_r(&t, &tm)) return "1970-01-01T00:00:00.000Z";
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, rem / 1'000'000);
}

nlohmann::json EventToJson(const v1::Event& e) {
  return Build<nlohmann::json>(e);
}

std::string ToJson(const v1::Event& e) {
  // ordered_json keeps seq, time, ... first, which reads better in `deskbox-events dump`.
  return Build<nlohmann::ordered_json>(e).dump(-1, ' ', false,
                                               nlohmann::json::error_handler_t::replace);
}

}  // namespace deskbox::recorder
