#include "cli/requests.h"

#include <fmt/format.h>

#include "common/base64.h"

namespace deskbox::cli {

using boost::beast::http::verb;
using nlohmann::json;

namespace {
std::string SandboxPath(std::string_view id, std::string_view rest = {}) {
  return fmt::format("/v1/sandboxes/{}{}", PercentEncode(id), rest);
}

// An EgressPolicyInput with only the fields given.
json EgressBody(const EgressPolicyArgs& policy) {
  json body = json::object();
  if (policy.default_action) body["default"] = *policy.default_action;
  if (!policy.allow.empty()) body["allow"] = policy.allow;
  if (!policy.deny.empty()) body["deny"] = policy.deny;
  return body;
}
}  // namespace

ApiRequest CreateRequest(const CreateCommand& c) {
  json body = json::object();
  if (c.template_name) body["template"] = *c.template_name;
  if (c.resolution)
    body["resolution"] = {{"width", c.resolution->width}, {"height", c.resolution->height}};
  if (c.timeout_s) body["timeout_s"] = *c.timeout_s;
  if (c.on_timeout) body["on_timeout"] = *c.on_timeout;
  if (!c.metadata.empty()) body["metadata"] = c.metadata;
  if (c.egress.given()) body["egress"] = EgressBody(c.egress);
  if (c.cpu_weight) body["limits"]["cpu_weight"] = *c.cpu_weight;
  if (c.cpu_max) body["limits"]["cpu_max"] = *c.cpu_max;
  if (c.exec_pids_max) body["limits"]["exec_pids_max"] = *c.exec_pids_max;
  if (c.exec_memory_mib) body["limits"]["exec_memory_mib"] = *c.exec_memory_mib;
  if (c.exec_disk_mib) body["limits"]["exec_disk_mib"] = *c.exec_disk_mib;
  return {verb::post, "/v1/sandboxes", std::move(body)};
}

ApiRequest ListRequest(const ListCommand& c) {
  std::string target = "/v1/sandboxes";
  if (c.state) target += "?state=" + PercentEncode(*c.state);
  return {verb::get, std::move(target), std::nullopt};
}

ApiRequest ShowRequest(std::string_view id) {
  return {verb::get, SandboxPath(id), std::nullopt};
}
ApiRequest RemoveRequest(std::string_view id) {
  return {verb::delete_, SandboxPath(id), std::nullopt};
}
ApiRequest PauseRequest(std::string_view id) {
  return {verb::post, SandboxPath(id, "/pause"), std::nullopt};
}
ApiRequest ResumeRequest(std::string_view id) {
  return {verb::post, SandboxPath(id, "/resume"), std::nullopt};
}

ApiRequest ExecRequest(const ExecCommand& c, const std::optional<std::string>& stdin_bytes) {
  json body = json::object();
  if (c.shell)
    body["shell"] = *c.shell;
  else
    body["argv"] = c.argv;
  if (!c.env.empty()) body["env"] = c.env;
  if (c.cwd) body["cwd"] = *c.cwd;
  if (stdin_bytes) body["stdin_b64"] = Base64Encode(*stdin_bytes);
  if (c.timeout_s) body["timeout_s"] = *c.timeout_s;
  if (c.max_output_bytes) body["max_output_bytes"] = *c.max_output_bytes;
  body["encoding"] = "base64";
  return {verb::post, SandboxPath(c.id, "/exec"), std::move(body)};
}

ApiRequest UploadRequest(const CopyCommand& c, std::string_view path) {
  std::string target = SandboxPath(c.sandbox_id, "/files?path=" + PercentEncode(path, true));
  if (c.mode) target += "&mode=" + *c.mode;
  if (c.parents) target += "&parents=1";
  return {verb::put, std::move(target), std::nullopt};
}

ApiRequest DownloadRequest(std::string_view sandbox_id, std::string_view path) {
  return {verb::get, SandboxPath(sandbox_id, "/files?path=" + PercentEncode(path, true)),
          std::nullopt};
}

ApiRequest ScreenshotRequest(const ScreenshotCommand& c) {
  return {verb::get, SandboxPath(c.id, "/screenshot?format=" + PercentEncode(c.format)),
          std::nullopt};
}

ApiRequest TokenCreateRequest(const TokenCreateCommand& c) {
  json body = {{"scope", c.scope}};
  if (c.ttl_s) body["ttl_s"] = *c.ttl_s;
  return {verb::post, SandboxPath(c.sandbox_id, "/tokens"), std::move(body)};
}

ApiRequest TokenListRequest(std::string_view sandbox_id) {
  return {verb::get, SandboxPath(sandbox_id, "/tokens"), std::nullopt};
}

ApiRequest TokenRemoveRequest(std::string_view token_id) {
  return {verb::delete_, "/v1/tokens/" + PercentEncode(token_id), std::nullopt};
}

ApiRequest EventsRequest(std::string_view id, uint64_t since, bool follow) {
  std::string query = follow ? fmt::format("?since={}&follow=1", since)
                             : fmt::format("?since={}&limit={}", since, kEventsPageLimit);
  return {verb::get, SandboxPath(id, "/events" + query), std::nullopt};
}

ApiRequest EgressShowRequest(std::string_view id) {
  return {verb::get, SandboxPath(id, "/egress"), std::nullopt};
}
ApiRequest EgressSetRequest(const EgressSetCommand& c) {
  return {verb::put, SandboxPath(c.id, "/egress"), EgressBody(c.policy)};
}

ApiRequest RecordingRequest(std::string_view id) {
  return {verb::get, SandboxPath(id, "/recording"), std::nullopt};
}
ApiRequest RecordingVideoRequest(const RecordingGetCommand& c) {
  std::string rest = c.segment ? fmt::format("/recording/segments/{:06}.mp4", *c.segment)
                               : std::string("/recording.mp4");
  return {verb::get, SandboxPath(c.id, rest), std::nullopt};
}
ApiRequest RecordingVerifyRequest(std::string_view id) {
  return {verb::get, SandboxPath(id, "/events/verify"), std::nullopt};
}
ApiRequest RecordingRemoveRequest(std::string_view id) {
  return {verb::delete_, SandboxPath(id, "/recording"), std::nullopt};
}

ApiRequest ReplayTokenRequest(const ReplayCommand& c) {
  return TokenCreateRequest({.sandbox_id = c.id, .scope = "replay", .ttl_s = c.ttl_s});
}

std::string ReplayUrl(const ServerUrl& url, std::string_view id, std::string_view token) {
  return url.ToString() + SandboxPath(id, "/replay?token=" + PercentEncode(token));
}

ApiRequest KeyListRequest() {
  return {verb::get, "/v1/keys", std::nullopt};
}
ApiRequest KeyCreateRequest(std::string_view name) {
  return {verb::post, "/v1/keys", json{{"name", name}}};
}
ApiRequest KeyRemoveRequest(std::string_view key_id) {
  return {verb::delete_, "/v1/keys/" + PercentEncode(key_id), std::nullopt};
}
ApiRequest TemplatesRequest() {
  return {verb::get, "/v1/templates", std::nullopt};
}

}  // namespace deskbox::cli
