#include "access_routes.h"

#include "recording_routes.h"

#include <fmt/format.h>

#include "api/json_input.h"

namespace deskbox::api {

using boost::beast::http::verb;
using nlohmann::json;
using vmhost::SandboxState;

void AccessRoutes::Register(Router& router) {
  auto add = [&](verb m, const char* pattern, Reply (AccessRoutes::*h)(Call&)) {
    router.Add({.method = m,
                .pattern = pattern,
                .access = Access::KeysOnly(),
                .handler = [this, h](Call& c) { return (this->*h)(c); }});
  };
  add(verb::post, "/v1/sandboxes/{id}/tokens", &AccessRoutes::CreateToken);
  add(verb::get, "/v1/sandboxes/{id}/tokens", &AccessRoutes::ListTokens);
  add(verb::delete_, "/v1/tokens/{id}", &AccessRoutes::DeleteToken);
  add(verb::post, "/v1/keys", &AccessRoutes::CreateKey);
  add(verb::get, "/v1/keys", &AccessRoutes::ListKeys);
  add(verb::delete_, "/v1/keys/{id}", &AccessRoutes::DeleteKey);
}

Reply AccessRoutes::CreateToken(Call& c) {
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto scope = in.Enum("scope", {"view", "control", "cdp", "replay"});
  if (in.ok() && !scope) in.Fail("scope is required (view, control, cdp or replay)");
  auto ttl = in.Integer("ttl_s", 1, 30 * 24 * 3600);
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  auto r = ctx_.sandboxes.Get(c.id);
  if (!r) co_return r.error();
  bool ended = (*r)->state == SandboxState::kStopped || (*r)->state == SandboxState::kFailed;
  // A replay token reads a recording, which outlives its sandbox until retention removes it.
  if (ended && *scope == "replay" && !RecordingRetained(ctx_.config, c.id))
    co_return Error(409, "invalid_state",
                    fmt::format("sandbox {} is {} and no recording of it is kept", c.id,
                                vmhost::ToString((*r)->state)));
  if (ended && *scope != "replay")
    co_return Error(409, "invalid_state",
                    fmt::format("sandbox {} is {}", c.id, vmhost::ToString((*r)->state)));
  int64_t now = ctx_.clock.NowMs();
  auto t = ctx_.credentials.CreateToken(c.id, *ParseScope(*scope), ttl.value_or(3600) * 1000,
                                        c.principal.id, now);
  if (!t) co_return FromStoreError(t.error());
  const auto& [rec, secret] = *t;
  co_return Json(201, {{"id", rec.id},
                       {"token", secret},
                       {"scope", rec.scope},
                       {"sandbox_id", rec.sandbox_id},
                       {"created_at", Rfc3339(rec.created_at_ms)},
                       {"expires_at", Rfc3339(rec.expires_at_ms)}});
}

Reply AccessRoutes::ListTokens(Call& c) {
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  json list = json::array();
  for (const auto& t : ctx_.credentials.LiveTokens(c.id, ctx_.clock.NowMs()))
    list.push_back({{"id", t.id},
                    {"scope", t.scope},
                    {"sandbox_id", t.sandbox_id},
                    {"created_at", Rfc3339(t.created_at_ms)},
                    {"expires_at", Rfc3339(t.expires_at_ms)}});
  co_return Json(200, {{"tokens", list}});
}

Reply AccessRoutes::DeleteToken(Call& c) {
  auto revoked = ctx_.credentials.RevokeToken(c.id, ctx_.clock.NowMs());
  if (!revoked) co_return FromStoreError(revoked.error());
  switch (*revoked) {
    case Credentials::RevokeResult::kRevoked:
      if (on_token_revoked_) on_token_revoked_(c.id);
      co_return NoContent();
    case Credentials::RevokeResult::kEnded:
      co_return NoContent();
    case Credentials::RevokeResult::kNotFound:
    case Credentials::RevokeResult::kLastKey:  // of keys only
      break;
  }
  co_return Error(404, "not_found", fmt::format("no token '{}'", c.id));
}

Reply AccessRoutes::CreateKey(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto name = in.String("name", 1, 64);
  if (in.ok() && !name) in.Fail("name is required");
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  auto k = ctx_.credentials.CreateKey(*name, ctx_.clock.NowMs());
  if (!k) co_return FromStoreError(k.error());
  const auto& [rec, secret] = *k;
  co_return Json(201, {{"id", rec.id},
                       {"name", rec.name},
                       {"key", secret},
                       {"created_at", Rfc3339(rec.created_at_ms)}});
}

Reply AccessRoutes::ListKeys(Call&) {
  json list = json::array();
  for (const auto& k : ctx_.credentials.LiveKeys())
    list.push_back({{"id", k.id}, {"name", k.name}, {"created_at", Rfc3339(k.created_at_ms)}});
  co_return Json(200, {{"keys", list}});
}

Reply AccessRoutes::DeleteKey(Call& c) {
  auto revoked = ctx_.credentials.RevokeKey(c.id, ctx_.clock.NowMs());
  if (!revoked) co_return FromStoreError(revoked.error());
  switch (*revoked) {
    case Credentials::RevokeResult::kRevoked:
      co_return NoContent();
    case Credentials::RevokeResult::kNotFound:
      co_return Error(404, "not_found", fmt::format("no active key '{}'", c.id));
    case Credentials::RevokeResult::kLastKey:
      co_return Error(409, "last_key",
                      "this is the only active API key; create another before revoking it");
    case Credentials::RevokeResult::kEnded:  // of tokens only
      break;
  }
  co_return Error(404, "not_found", fmt::format("no active key '{}'", c.id));
}

}  // namespace deskbox::api
