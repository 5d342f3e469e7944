#pragma once
// AccessRoutes: API keys (/v1/keys) and scoped sandbox tokens (/v1/sandboxes/{id}/tokens,
// /v1/tokens/{id}). Revoking a token ends the live connections it opened (on_token_revoked).
#include <functional>

#include "api_context.h"

namespace deskbox::api {

class AccessRoutes {
 public:
  using TokenRevoked = std::function<void(const std::string& token_id)>;
  AccessRoutes(ApiContext& ctx, TokenRevoked on_token_revoked)
      : ctx_(ctx), on_token_revoked_(std::move(on_token_revoked)) {}
  void Register(Router& router);

 private:
  Reply CreateToken(Call& c);
  Reply ListTokens(Call& c);
  Reply DeleteToken(Call& c);
  Reply CreateKey(Call& c);
  Reply ListKeys(Call& c);
  Reply DeleteKey(Call& c);

  ApiContext& ctx_;
  TokenRevoked on_token_revoked_;
};

}  // namespace deskbox::api
