#pragma once
// Blocking HTTP/1.1 client for the deskbox API over plain TCP (Boost.Beast). One connection per
// request: the CLI makes few requests and this keeps every failure local to one call. Every
// socket operation has a timeout; bodies that can be large are streamed in 64 KiB pieces.
#include <chrono>
#include <expected>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "cli/requests.h"
#include "cli/server_url.h"

namespace deskbox::cli {

struct HttpResponse {
  unsigned status = 0;
  std::string reason;
  std::string content_type;
  std::string retry_after;
  // The whole body of a JSON call, or of an error response to a streamed call.
  std::string body;
  bool ok() const { return status >= 200 && status < 300; }
};

// No usable HTTP response: the daemon could not be reached, the connection broke or timed
// out, or a body sink or upload source failed. `message` is complete and names the URL (or
// the local file); it never contains the credential.
struct ClientError {
  std::string message;
};

// Gets a streamed body piece by piece; returns an error message to abort.
using BodySink = std::function<std::optional<std::string>(std::string_view piece)>;

struct UploadSource {
  int fd = -1;
  std::string name;              // for messages: the local path, or "stdin"
  std::optional<uint64_t> size;  // sent as Content-Length; without it the body is chunked
};

class ApiClient {
 public:
  // `credential`, when set, goes in "Authorization: Bearer …"; the caller has checked it is a
  // valid header value.
  ApiClient(ServerUrl url, std::optional<std::string> credential);

  // Sends `request` (its JSON body, if any) and reads the whole response; bodies over 64 MiB
  // are refused. `wait` bounds each socket operation, so it is the longest the daemon may take
  // to answer.
  std::expected<HttpResponse, ClientError> Call(const ApiRequest& request,
                                                std::chrono::seconds wait);

  // Sends `request` and passes a 2xx response's body to `sink` as it arrives (no size limit).
  // A non-2xx response's body is returned in HttpResponse::body instead (capped at 1 MiB).
  // `idle` bounds the wait for each piece; nullopt waits forever (events --follow).
  std::expected<HttpResponse, ClientError> Download(const ApiRequest& request, const BodySink& sink,
                                                    std::optional<std::chrono::seconds> idle);

  // Sends `request` with the bytes read from `source` as its body, then reads the (JSON)
  // response. If the daemon answers early (e.g. 413) and drops the connection, that answer is
  // returned when it can still be read.
  std::expected<HttpResponse, ClientError> Upload(const ApiRequest& request,
                                                  const UploadSource& source,
                                                  std::chrono::seconds idle);

  const ServerUrl& url() const { return url_; }

 private:
  ServerUrl url_;
  std::optional<std::string> credential_;
};

}  // namespace deskbox::cli
