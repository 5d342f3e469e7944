#include "egress_binding.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <utility>

#include "api/json_input.h"
#include "common/files.h"
#include "common/log.h"

namespace deskbox::api {

namespace asio = boost::asio;
using boost::beast::http::verb;
using nlohmann::json;
using vmhost::SandboxState;

namespace {
constexpr char kEgressLog[] = "api";
}

EgressBinding::EgressBinding(ApiContext& ctx) : ctx_(ctx) {
  const DaemonConfig& config = ctx_.config;
  egress::EgressOptions eo;
  std::vector<egress::Cidr> reachable;
  for (const auto& c : config.egress_reachable)
    reachable.push_back(*egress::ParseCidr(c));  // validated by ParseConfig
  eo.reachability = egress::Reachability(std::move(reachable));
  std::vector<std::string> resolvers = config.egress_resolvers;
  if (resolvers.empty()) {
    if (auto text = ReadFile("/etc/resolv.conf", 64 * 1024))
      resolvers = ResolversFromResolvConf(*text);
    if (resolvers.empty())
      log::Warn(kEgressLog, "no DNS resolver in /etc/resolv.conf: egress will answer SERVFAIL");
  }
  for (const auto& r : resolvers) {
    auto p = ParseResolver(r);
    if (p) eo.resolvers.emplace_back(asio::ip::make_address(p->first), p->second);
  }
  eo.dns_queries_per_second = config.egress_dns_qps;
  // Two descriptors per proxied connection; leave room for everything else deskboxd holds.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    eo.max_connections_total =
        std::max<size_t>(64, (nofile.rlim_cur > 2048 ? nofile.rlim_cur - 2048 : 0) / 2);
  egress_ = std::make_unique<egress::Egress>(
      ctx_.executor, static_cast<egress::UplinkSockets&>(*this), ctx_.events, std::move(eo));
}

void EgressBinding::Register(Router& router) {
  // A control token may read the policy, only an API key may change it.
  router.Add({.method = verb::get,
              .pattern = "/v1/sandboxes/{id}/egress",
              .access = Access::Tokens({Scope::kControl}),
              .handler = [this](Call& c) { return GetEgress(c); }});
  router.Add({.method = verb::put,
              .pattern = "/v1/sandboxes/{id}/egress",
              .access = Access::KeysOnly(),
              .handler = [this](Call& c) { return PutEgress(c); }});
}

void EgressBinding::OnSandboxState(const SandboxRecord& r, SandboxState) {
  if (r.state == SandboxState::kFailed || r.state == SandboxState::kStopped) egress_->Detach(r.id);
}

asio::awaitable<std::expected<std::vector<UniqueFd>, egress::Error>> EgressBinding::Open(
    bool ipv6, bool udp, unsigned count) {
  auto r = co_await ctx_.manager.OpenUplinkSockets(ipv6, udp, count);
  if (!r) co_return std::unexpected(ToEgressError(std::move(r.error())));
  co_return std::move(*r);
}

egress::DefaultAction EgressBinding::Default() const {
  return ctx_.config.egress_default == "allow" ? egress::DefaultAction::kAllow
                                               : egress::DefaultAction::kDeny;
}

std::expected<egress::Policy, egress::Error> EgressBinding::StoredPolicy(
    const std::string& egress_json) const {
  if (egress_json.empty()) return egress::Policy{Default(), {}, {}};
  auto j = ParseJson(egress_json);
  if (!j)
    return std::unexpected(
        egress::Error{egress::ErrorCode::kBadPolicy, "stored egress policy is not JSON"});
  return egress::ParsePolicy(*j, Default());
}

void EgressBinding::DetachIfGone(const std::string& id) {
  auto sb = ctx_.manager.Find(id);
  if (!sb || (sb->state() != SandboxState::kRunning && sb->state() != SandboxState::kPaused))
    egress_->Detach(id);
}

asio::awaitable<std::expected<void, std::string>> EgressBinding::Attach(
    const std::string& id, uint32_t slot, const std::string& policy_json) {
  auto policy = StoredPolicy(policy_json);
  if (!policy) co_return std::unexpected(policy.error().message);
  auto fds = co_await ctx_.manager.OpenEgressSockets(slot);
  if (!fds) co_return std::unexpected(fds.error().message);
  egress::SandboxSockets s;
  auto take = [&](const char* role) {
    auto it = fds->find(role);
    return it == fds->end() ? UniqueFd() : std::move(it->second);
  };
  s.tcp4 = take("tcp4");
  s.tcp6 = take("tcp6");
  s.udp4 = take("udp4");
  s.udp6 = take("udp6");
  s.nflog = take("nflog");
  if (!s.tcp4 || !s.udp4) co_return std::unexpected("the jailer returned no egress sockets");
  egress_->Attach(id, std::move(s), std::move(*policy));
  co_return std::expected<void, std::string>{};
}

Reply EgressBinding::GetEgress(Call& c) {
  auto r = ctx_.sandboxes.Get(c.id);
  if (!r) co_return r.error();
  auto p = StoredPolicy((*r)->egress_json);
  if (!p) co_return Error(500, "internal", p.error().message);
  co_return Json(200, egress::PolicyJson(*p));
}

Reply EgressBinding::PutEgress(Call& c) {
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  SandboxRecord* rec =
      ctx_.sandboxes.Find(c.id);  // the record may have gone while the body was read
  if (!rec) co_return Error(404, "not_found", fmt::format("no sandbox {}", c.id));
  auto p = egress::ParsePolicy(*body, Default());
  if (!p) co_return Error(400, "invalid_request", p.error().message);
  if (!IsAlive(rec->state))
    co_return Error(409, "invalid_state",
                    fmt::format("sandbox {} is {}", rec->id, vmhost::ToString(rec->state)));
  json canonical = egress::PolicyJson(*p);
  std::string before = std::exchange(rec->egress_json, Dump(canonical));
  if (auto saved = ctx_.sandboxes.Save(*rec); !saved) {
    rec->egress_json = std::move(before);  // the policy in force stays the one on record
    co_return FromStoreError(saved.error());
  }
  egress_->SetPolicy(rec->id,
                     std::move(*p));  // not attached while creating: the stored one is used
  auto e = c.NewEvent(rec->id);
  auto* d = e.mutable_egress();
  d->set_protocol("policy");
  d->set_phase("policy");
  d->set_allowed(true);
  d->set_reason(fmt::format("policy set: default {}, {} allow and {} deny rules",
                            canonical["default"].get<std::string>(), canonical["allow"].size(),
                            canonical["deny"].size()));
  ctx_.events.Emit(std::move(e));
  co_return Json(200, canonical);
}

}  // namespace deskbox::api
