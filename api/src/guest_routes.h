#pragma once
// GuestRoutes: what a client does inside a running guest through its agent — exec, file upload
// and download, the clipboard. Each is a guest operation (SandboxRegistry::BeginGuestOperation):
// a delete or pause meanwhile ends it with 410 or 409.
#include "api_context.h"

namespace deskbox::api {

class GuestRoutes {
 public:
  explicit GuestRoutes(ApiContext& ctx) : ctx_(ctx) {}
  void Register(Router& router);

 private:
  Reply Exec(Call& c);
  Reply PutFile(Call& c);
  Reply GetFile(Call& c);
  Reply GetClipboard(Call& c);
  Reply PutClipboard(Call& c);
  // The sandbox's VM with a live agent connection, or the answer (502) when it has none.
  std::expected<std::shared_ptr<vmhost::Sandbox>, HttpResponse> AgentOf(
      const std::string& id) const;
  // One agent call as a guest operation on a running sandbox: the agent's answer, or the HTTP
  // answer when the sandbox is unknown, not running, deleted meanwhile or the call failed.
  boost::asio::awaitable<std::expected<agent::v1::Response, HttpResponse>> CallAgent(
      const std::string& id, std::string what, agent::v1::Request request,
      std::chrono::milliseconds timeout);

  ApiContext& ctx_;
};

}  // namespace deskbox::api
