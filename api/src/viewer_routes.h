#pragma once
// ViewerRoutes: the live view — /vnc (RFB over WebSocket, through the ViewerBridge), /view (the
// noVNC page) and /view/novnc/... (noVNC's modules, from the operator's noVNC install).
// Viewers end when the sandbox leaves the running state or their token is revoked or expires.
#include <memory>

#include "api_context.h"
#include "vnc_bridge/viewer_bridge.h"

namespace deskbox::api {

class ViewerRoutes final : public SandboxStateListener {
 public:
  explicit ViewerRoutes(ApiContext& ctx);
  void Register(Router& router);
  vnc_bridge::ViewerBridge& bridge() { return *viewers_; }

  void OnSandboxState(const SandboxRecord& r, vmhost::SandboxState from) override;

 private:
  Reply ViewerSocket(Call& c);
  Reply ViewerPage(Call& c);
  Reply ViewerAsset(Call& c);
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, vnc_bridge::Error>> DialRfb(
      const std::string& id);

  ApiContext& ctx_;
  std::unique_ptr<vnc_bridge::ViewerBridge> viewers_;
};

}  // namespace deskbox::api
