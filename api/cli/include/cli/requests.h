#pragma once
// Each command as the HTTP request(s) it makes: method, target (without the URL prefix) and
// JSON body. Pure, so tests see exactly what would be sent.
#include <boost/beast/http/verb.hpp>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/args.h"

namespace deskbox::cli {

struct ApiRequest {
  boost::beast::http::verb method = boost::beast::http::verb::get;
  std::string target;  // "/v1/…?…", percent-encoded
  std::optional<nlohmann::json> body;
};

// Largest stdin `exec --stdin` forwards: base64 makes it 4/3 larger and JSON bodies are
// capped at 1 MiB by the daemon, which leaves room for argv and env.
inline constexpr size_t kMaxExecStdinBytes = 720 * 1024;
// Server default when exec has no --timeout.
inline constexpr uint64_t kDefaultExecTimeoutS = 60;

ApiRequest CreateRequest(const CreateCommand& c);
ApiRequest ListRequest(const ListCommand& c);
ApiRequest ShowRequest(std::string_view id);
ApiRequest RemoveRequest(std::string_view id);
ApiRequest PauseRequest(std::string_view id);
ApiRequest ResumeRequest(std::string_view id);
// Output is always asked for as base64 so binary output comes back byte for byte.
ApiRequest ExecRequest(const ExecCommand& c, const std::optional<std::string>& stdin_bytes);
// `path` is the final remote path (a trailing '/' already resolved by the caller).
ApiRequest UploadRequest(const CopyCommand& c, std::string_view path);
ApiRequest DownloadRequest(std::string_view sandbox_id, std::string_view path);
ApiRequest ScreenshotRequest(const ScreenshotCommand& c);
ApiRequest TokenCreateRequest(const TokenCreateCommand& c);
ApiRequest TokenListRequest(std::string_view sandbox_id);
ApiRequest TokenRemoveRequest(std::string_view token_id);
inline constexpr uint64_t kEventsPageLimit = 1000;
ApiRequest EventsRequest(std::string_view id, uint64_t since, bool follow);
ApiRequest EgressShowRequest(std::string_view id);
// The body has only the fields given ({} when none): the daemon replaces the whole policy.
ApiRequest EgressSetRequest(const EgressSetCommand& c);
ApiRequest RecordingRequest(std::string_view id);
// recording.mp4, or the one segment's file (000003.mp4) when c.segment is set.
ApiRequest RecordingVideoRequest(const RecordingGetCommand& c);
ApiRequest RecordingVerifyRequest(std::string_view id);
ApiRequest RecordingRemoveRequest(std::string_view id);
// A token create with scope "replay", the same body as TokenCreateRequest's.
ApiRequest ReplayTokenRequest(const ReplayCommand& c);
// The replay page a browser opens: the daemon's URL (with its prefix), then the route with the
// token as ?token=.
std::string ReplayUrl(const ServerUrl& url, std::string_view id, std::string_view token);
ApiRequest KeyListRequest();
ApiRequest KeyCreateRequest(std::string_view name);
ApiRequest KeyRemoveRequest(std::string_view key_id);
ApiRequest TemplatesRequest();

}  // namespace deskbox::cli
