#pragma once
// LifecycleRoutes: templates, create, list, get, patch, delete, pause and resume; re-adopting the
// sandboxes of a previous process; and what vmhost reports by itself (a QEMU that exits, a
// browser refresh that ends). State changes go through SandboxRegistry::Transition.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "api_context.h"
#include "egress_binding.h"
#include "vmhost/guest_agent.h"

namespace deskbox::api {

class LifecycleRoutes {
 public:
  LifecycleRoutes(ApiContext& ctx, EgressBinding& egress);
  ~LifecycleRoutes();
  void Register(Router& router);

  // Re-adopts the sandboxes of a previous process (or marks them failed).
  boost::asio::awaitable<void> Recover();
  // Destroys every alive sandbox (deskboxd --destroy-on-exit).
  boost::asio::awaitable<void> DestroyAll();
  // Sandboxes being created now (not yet in the registry).
  size_t creating() const { return creating_; }
  nlohmann::json SandboxJson(const SandboxRecord& r) const;

 private:
  Reply ListTemplates(Call& c);
  Reply CreateSandbox(Call& c);
  Reply ListSandboxes(Call& c);
  Reply GetSandbox(Call& c);
  Reply PatchSandbox(Call& c);
  // Writes a sandbox's exec limits into its guest; "" when done, else why not.
  boost::asio::awaitable<std::string> SetGuestLimits(const std::string& id, vmhost::GuestLimits limits);
  Reply DeleteSandbox(Call& c);
  Reply PauseSandbox(Call& c);
  Reply ResumeSandbox(Call& c);
  bool RateLimitAllows(double* retry_after_s);
  // vmhost's own report of a change: a QEMU that exits turns its sandbox failed.
  void OnVmTransition(const vmhost::Sandbox& sb, vmhost::SandboxState from);

  ApiContext& ctx_;
  EgressBinding& egress_;
  size_t creating_ = 0;
  double bucket_tokens_;
  std::chrono::steady_clock::time_point bucket_time_;
};

}  // namespace deskbox::api
