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
  // A guest operation on a running sandbox and its agent, held for one call; or the answer
  // when the sandbox is unknown, not running, or has no agent connection (502).
  struct AgentCall {
    SandboxRegistry::GuestOperation op;
    std::shared_ptr<vmhost::GuestAgent> agent;
  };
  std::expected<AgentCall, HttpResponse> BeginAgentCall(const std::string& id,
                                                        std::string what) const;

  ApiContext& ctx_;
};

}  // namespace deskbox::api
