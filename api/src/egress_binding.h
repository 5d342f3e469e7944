#pragma once
// EgressBinding: each sandbox's egress (egress::Egress) bound to its record — the stored policy
// is attached when a sandbox is created or re-adopted, detached when it fails or stops — and the
// GET/PUT /v1/sandboxes/{id}/egress routes (docs/egress.md).
#include <memory>
#include <string>

#include "api_context.h"
#include "egress/egress.h"

namespace deskbox::api {

class EgressBinding final : public SandboxStateListener, private egress::UplinkSockets {
 public:
  explicit EgressBinding(ApiContext& ctx);
  void Register(Router& router);

  // Serves the sandbox's egress sockets under `policy_json` (the stored canonical policy).
  boost::asio::awaitable<std::expected<void, std::string>> Attach(const std::string& id,
                                                                  uint32_t slot,
                                                                  const std::string& policy_json);
  // Detaches a sandbox whose VM is no longer there: it may have failed while the jailer made
  // its sockets, so that the Detach on its failure came before the Attach.
  void DetachIfGone(const std::string& id);
  void Detach(const std::string& id) { egress_->Detach(id); }
  // The operator's default for a policy that gives none (--egress-default).
  egress::DefaultAction Default() const;
  // A sandbox's stored policy ("" when created before it had one: the operator's default).
  std::expected<egress::Policy, egress::Error> StoredPolicy(const std::string& egress_json) const;
  const egress::Egress& egress() const { return *egress_; }

  void OnSandboxState(const SandboxRecord& r, vmhost::SandboxState from) override;

 private:
  boost::asio::awaitable<std::expected<std::vector<UniqueFd>, egress::Error>> Open(
      bool ipv6, bool udp, unsigned count) override;
  Reply GetEgress(Call& c);
  Reply PutEgress(Call& c);

  ApiContext& ctx_;
  std::unique_ptr<egress::Egress> egress_;
};

}  // namespace deskbox::api
