#include "api/service.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <openssl/evp.h>
#include <sys/resource.h>

#include <algorithm>
#include <deque>
#include <filesystem>

#include "api/json_input.h"
#include "common/files.h"
#include "common/log.h"
#include "recorder/event_json.h"
#include "service_internal.h"

namespace deskbox::api {

namespace asio = boost::asio;
using nlohmann::json;
using namespace std::chrono_literals;
using vmhost::SandboxState;
constexpr char kLog[] = "api";

namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Rfc3339(int64_t ms) { return recorder::FormatTimeRfc3339(ms * 1000000); }
json TimeOrNull(int64_t ms) { return ms ? json(Rfc3339(ms)) : json(nullptr); }

HttpResponse NoContent() {
  HttpResponse r;
  r.status = 204;
  return r;
}

HttpResponse FromVmError(const vmhost::VmError& e) {
  using C = vmhost::VmError::Code;
  switch (e.code) {
    case C::kNotFound: return Error(404, "not_found", e.message);
    case C::kInvalidState: return Error(409, "invalid_state", e.message);
    case C::kCapacity: return Error(429, "sandbox_limit", e.message);
    case C::kTimeout: return Error(504, "guest_timeout", e.message);
    case C::kAgent:
    case C::kGuest: return Error(502, "guest_error", e.message);
    case C::kJailer:
    case C::kQemu: return Error(500, "internal", e.message);
  }
  return Error(500, "internal", e.message);
}

// `file`: the call names a guest path, so the agent's NOT_FOUND / TOO_LARGE are about it.
HttpResponse FromAgentError(const vmhost::AgentError& e, bool file = false) {
  using C = vmhost::AgentError::Code;
  if (e.code == C::kTimeout) return Error(504, "guest_timeout", e.message);
  if (e.code == C::kGuest && file) {
    switch (static_cast<agent::v1::Error::Code>(e.guest_code)) {
      case agent::v1::Error::INVALID_ARGUMENT: return Error(400, "invalid_path", e.message);
      case agent::v1::Error::NOT_FOUND: return Error(404, "file_not_found", e.message);
      case agent::v1::Error::TOO_LARGE: return Error(413, "payload_too_large", e.message);
      case agent::v1::Error::TIMEOUT: return Error(504, "guest_timeout", e.message);
      default: break;
    }
  }
  return Error(502, "guest_error", e.message);
}

HttpResponse FromBodyError(const BodyError& e) {
  switch (e.code) {
    case BodyError::Code::kTooLarge: return Error(413, "payload_too_large", e.message);
    case BodyError::Code::kTimeout: return Error(400, "invalid_request", e.message);
    case BodyError::Code::kMalformed: return Error(400, "invalid_request", e.message);
    case BodyError::Code::kIo: break;
  }
  return Error(400, "invalid_request", "reading the request body: " + e.message);
}

// Guest paths: absolute, no NUL, no "." or ".." component, bounded.
std::optional<std::string> CheckGuestPath(const std::string& p) {
  if (p.empty()) return "path is required (files?path=/absolute/path)";
  if (p.size() > kMaxPathBytes) return fmt::format("path is longer than {} bytes", kMaxPathBytes);
  if (p[0] != '/') return "path must be absolute";
  if (p.find('\0') != std::string::npos) return "path must not contain NUL";
  size_t start = 1;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    std::string_view part(p.data() + start, end - start);
    if (part == ".." || part == ".") return "path must not contain '.' or '..' components";
    start = end + 1;
  }
  if (p.back() == '/') return "path names a directory";
  return std::nullopt;
}

// The "metadata" field: string → string, at most 64 keys of 1..64 bytes, values ≤ 1024 bytes.
std::optional<json> ReadMetadata(ObjectReader& in) {
  const json* m = in.Object("metadata");
  if (!m) return std::nullopt;
  if (m->size() > 64) in.Fail("metadata has more than 64 keys");
  for (auto it = m->begin(); it != m->end() && in.ok(); ++it) {
    if (it.key().empty() || it.key().size() > 64) in.Fail("metadata keys must be 1 to 64 bytes long");
    else if (!it->is_string()) in.Fail(fmt::format("metadata.{} must be a string", it.key()));
    else if (it->get_ref<const std::string&>().size() > 1024)
      in.Fail(fmt::format("metadata.{} is longer than 1024 bytes", it.key()));
  }
  return *m;
}

std::string StateName(SandboxState s) { return std::string(vmhost::ToString(s)); }

}  // namespace

// One request on its way through the service.
namespace {
using boost::beast::http::verb;

std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < path.size()) {
    if (path[start] == '/') {
      ++start;
      continue;
    }
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    out.push_back(path.substr(start, end - start));
    start = end;
  }
  return out;
}

// Matches `path` against `pattern`; fills `id` from a {id} segment.
// Matches `path` against `pattern`; fills `id` and `target` from {id} and {target} segments.
// A trailing slash is accepted only where `trailing_slash` says so (CDP clients add one).
// `{path}` as the last segment of a pattern takes one or more segments (joined with '/').
bool Match(std::string_view pattern, std::string_view path, bool trailing_slash, std::string& id,
           std::string& target) {
  auto p = Segments(pattern), s = Segments(path);
  bool rest = !p.empty() && p.back() == "{path}";
  if (rest ? s.size() < p.size() : p.size() != s.size()) return false;
  if (!trailing_slash && !path.empty() && path.back() == '/' && path.size() > 1) return false;
  if (path.find("//") != std::string_view::npos) return false;
  std::string found, found_target;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == "{id}") found = s[i];
    else if (p[i] == "{target}") found_target = s[i];
    else if (p[i] == "{path}") {
      for (size_t j = i; j < s.size(); ++j) found_target += (j > i ? "/" : "") + std::string(s[j]);
    }
    else if (p[i] != s[i]) return false;
  }
  id = found;
  target = found_target;
  return true;
}

// The value of cookie `name` in a Cookie header ("" if absent).
std::string CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    size_t end = header.find(';');
    std::string_view part = header.substr(0, end);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.size() > name.size() && part.starts_with(name) && part[name.size()] == '=')
      return std::string(part.substr(name.size() + 1));
    if (end == std::string_view::npos) break;
    header.remove_prefix(end + 1);
  }
  return {};
}

}  // namespace


ApiService::ApiService(asio::any_io_executor executor, vmhost::SandboxManager& manager, Store& store,
                       recorder::LogEventSink& events, DaemonConfig config)
    : executor_(executor),
      manager_(manager),
      store_(store),
      events_(events),
      config_(std::move(config)),
      credentials_(store),
      cdp_(executor, *this, events),
      viewers_(std::make_unique<vnc_bridge::ViewerBridge>(
          executor, [this](const std::string& id) { return DialRfb(id); }, events)),
      bucket_tokens_(config_.creates_per_second < 1 ? 1 : config_.creates_per_second),
      bucket_time_(std::chrono::steady_clock::now()),
      clock_(executor) {
  manager_.SetObserver([this](const vmhost::Sandbox& sb, SandboxState from) { OnTransition(sb, from); });
  // A refresh that ended is no longer one for the next deskboxd to do again.
  manager_.SetBrowserObserver([this](const vmhost::Sandbox& sb) {
    auto it = records_.find(sb.id);
    if (it == records_.end() || !it->second.browser_refreshing) return;
    it->second.browser_refreshing = false;
    Save(it->second);
  });
  manager_.SetInUse(
      [this](const std::string& id) { return cdp_.Sessions(id) > 0 || viewers_->Viewers(id) > 0; });
  egress::EgressOptions eo;
  std::vector<egress::Cidr> reachable;
  for (const auto& c : config_.egress_reachable) reachable.push_back(*egress::ParseCidr(c));  // validated by ParseConfig
  eo.reachability = egress::Reachability(std::move(reachable));
  std::vector<std::string> resolvers = config_.egress_resolvers;
  if (resolvers.empty()) {
    if (auto text = ReadFile("/etc/resolv.conf", 64 * 1024)) resolvers = ResolversFromResolvConf(*text);
    if (resolvers.empty()) log::Warn(kLog, "no DNS resolver in /etc/resolv.conf: egress will answer SERVFAIL");
  }
  for (const auto& r : resolvers) {
    auto p = ParseResolver(r);
    if (p) eo.resolvers.emplace_back(asio::ip::make_address(p->first), p->second);
  }
  eo.dns_queries_per_second = config_.egress_dns_qps;
  // Two descriptors per proxied connection; leave room for everything else deskboxd holds.
  if (rlimit nofile{}; ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY)
    eo.max_connections_total = std::max<size_t>(64, (nofile.rlim_cur > 2048 ? nofile.rlim_cur - 2048 : 0) / 2);
  egress_ = std::make_unique<egress::Egress>(executor, static_cast<egress::UplinkSockets&>(*this), events, std::move(eo));
}

ApiService::~ApiService() {
  *alive_ = false;
  manager_.SetObserver(nullptr);
  manager_.SetBrowserObserver(nullptr);
  manager_.SetInUse(nullptr);
  flush_pool_.join();
}

std::expected<std::optional<std::string>, std::string> ApiService::Load() {
  if (auto r = credentials_.Load(); !r) return std::unexpected(r.error());
  auto recs = store_.LoadSandboxes();
  if (!recs) return std::unexpected(recs.error());
  for (auto& r : *recs) records_[r.id] = std::move(r);
  return credentials_.EnsureBootstrapKey(config_.api_key, config_.state_dir + "/api-key", NowMs());
}

asio::awaitable<void> ApiService::Recover() {
  std::vector<vmhost::AdoptRequest> wanted;
  for (auto& [id, r] : records_) {
    if (r.state == "creating") {
      r.failure = "deskboxd stopped while the sandbox was being created";
      std::string from = r.state;
      r.state = "failed";
      r.expires_at_ms = 0;
      Save(r);
      EmitLifecycle(r, nullptr, from, "failed", "restart_recovery", r.failure);
    } else if (r.state == "running" || r.state == "paused") {
      wanted.push_back({r.id, r.slot, r.qemu_pid,
                        std::chrono::system_clock::time_point(std::chrono::milliseconds(r.created_at_ms)),
                        r.browser_refreshing});
    }
  }
  auto results = co_await manager_.Recover(std::move(wanted));
  for (const auto& res : results) {
    auto it = records_.find(res.id);
    if (it == records_.end()) continue;
    SandboxRecord& r = it->second;
    std::string from = r.state;
    if (res.adopted) {
      if (auto a = co_await AttachEgress(r.id, r.slot, r.egress_json); !a)
        log::Error(kLog, "sandbox {}: egress not re-attached: {} (its guest reaches nothing)", r.id, a.error());
      DetachIfGone(r.id);
      r.state = StateName(res.state);
      if (r.state == "running" && r.expires_at_ms == 0) r.expires_at_ms = NowMs() + int64_t{r.timeout_s} * 1000;
      if (r.state == "paused") r.expires_at_ms = 0;
      Save(r);
      EmitLifecycle(r, nullptr, from, r.state, "restart_recovery", "adopted by a new deskboxd process");
    } else {
      r.state = "failed";
      r.failure = "lost while deskboxd was down: " + res.failure;
      r.expires_at_ms = 0;
      Save(r);
      EmitLifecycle(r, nullptr, from, "failed", "restart_recovery", r.failure);
    }
  }
  asio::co_spawn(executor_, TimeoutLoop(alive_), asio::detached);
}

asio::awaitable<void> ApiService::Shutdown() {
  *alive_ = false;
  clock_.cancel();
  for (const auto& [id, r] : records_) EndCdpSessions(id, "deskboxd is stopping");
  while (!mirrors_.empty()) StopMirror(mirrors_.begin()->first);
  if (config_.destroy_on_exit) {
    for (auto& [id, r] : records_) {
      if (r.state != "running" && r.state != "paused" && r.state != "creating") continue;
      auto d = co_await manager_.Destroy(id);
      std::string from = r.state;
      r.state = "stopped";
      r.stopped_at_ms = NowMs();
      r.expires_at_ms = 0;
      Save(r);
      EmitLifecycle(r, nullptr, from, "stopped", "shutdown", d ? "" : d.error().message);
    }
  }
  co_await manager_.Shutdown(/*keep_sandboxes=*/!config_.destroy_on_exit);
  co_await FlushEvents();
}

void ApiService::Save(SandboxRecord& r) {
  r.updated_at_ms = NowMs();
  if (auto s = store_.PutSandbox(r); !s) log::Error(kLog, "sandbox {}: {}", r.id, s.error());
}

void ApiService::FillActor(recorder::v1::Event& e, const Call* c) const {
  auto* a = e.mutable_actor();
  if (!c) {
    a->set_kind(recorder::v1::Actor::SYSTEM);
    return;
  }
  a->set_kind(c->principal.kind == Principal::Kind::kApiKey ? recorder::v1::Actor::API_KEY
                                                              : recorder::v1::Actor::TOKEN);
  a->set_id(c->principal.id);
  a->set_remote(c->ex.remote());
  e.set_request_id(c->request_id);
}

void ApiService::EmitLifecycle(const SandboxRecord& r, const Call* c, std::string from, std::string to,
                               std::string reason, std::string detail) {
  recorder::v1::Event e;
  e.set_sandbox_id(r.id);
  FillActor(e, c);
  auto* l = e.mutable_lifecycle();
  l->set_from_state(std::move(from));
  l->set_to_state(std::move(to));
  l->set_reason(std::move(reason));
  l->set_detail(std::move(detail));
  events_.Emit(std::move(e));
}

asio::awaitable<void> ApiService::FlushEvents() {
  // Flush blocks until the writer thread has the events on disk: not on the io_context thread.
  co_await asio::post(flush_pool_, asio::use_awaitable);
  events_.Flush();
  co_await asio::post(executor_, asio::use_awaitable);
}

void ApiService::OnTransition(const vmhost::Sandbox& sb, SandboxState from) {
  // A mirror follows one running VM: pause, stop and failure end it (a slot is reused later).
  if (sb.state != SandboxState::kRunning) StopMirror(sb.id);
  if (sb.state == SandboxState::kFailed || sb.state == SandboxState::kStopped) egress_->Detach(sb.id);
  // Transitions the API asks for are recorded where it asks; here only the ones nobody asked
  // for: a QEMU that exits turns its sandbox failed.
  if (sb.state != SandboxState::kFailed) return;
  auto it = records_.find(sb.id);
  if (it == records_.end() || it->second.state == "failed" || it->second.state == "stopped") return;
  SandboxRecord& r = it->second;
  EndCdpSessions(r.id, "sandbox failed");
  r.state = "failed";
  r.failure = sb.failure.empty() ? "the sandbox's VM failed" : sb.failure;
  r.expires_at_ms = 0;
  Save(r);
  EmitLifecycle(r, nullptr, StateName(from), "failed", "qemu_exit", r.failure);
}

asio::awaitable<std::expected<std::vector<UniqueFd>, std::string>> ApiService::Open(bool ipv6, bool udp,
                                                                                  unsigned count) {
  auto r = co_await manager_.OpenUplinkSockets(ipv6, udp, count);
  if (!r) co_return std::unexpected(r.error().message);
  co_return std::move(*r);
}

egress::DefaultAction ApiService::EgressDefault() const {
  return config_.egress_default == "allow" ? egress::DefaultAction::kAllow : egress::DefaultAction::kDeny;
}

std::expected<egress::Policy, std::string> ApiService::StoredPolicy(const std::string& egress_json) const {
  if (egress_json.empty()) return egress::Policy{EgressDefault(), {}, {}};
  auto j = ParseJson(egress_json);
  if (!j) return std::unexpected("stored egress policy is not JSON");
  return egress::ParsePolicy(*j, EgressDefault());
}

void ApiService::DetachIfGone(const std::string& id) {
  // The VM may have failed while the jailer made the sockets: OnTransition's Detach then came
  // before the Attach.
  auto sb = manager_.Find(id);
  if (!sb || (sb->state != SandboxState::kRunning && sb->state != SandboxState::kPaused)) egress_->Detach(id);
}

asio::awaitable<std::expected<void, std::string>> ApiService::AttachEgress(const std::string& id, uint32_t slot,
                                                                         const std::string& policy_json) {
  auto policy = StoredPolicy(policy_json);
  if (!policy) co_return std::unexpected(policy.error());
  auto fds = co_await manager_.OpenEgressSockets(slot);
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

size_t ApiService::AliveCount() const {
  size_t n = creating_;
  for (const auto& [id, r] : records_)
    if (r.state == "running" || r.state == "paused" || r.state == "creating") ++n;
  return n;
}

bool ApiService::RateLimitAllows(double* retry_after_s) {
  auto now = std::chrono::steady_clock::now();
  double rate = config_.creates_per_second;
  double burst = std::max(1.0, rate);
  bucket_tokens_ = std::min(burst, bucket_tokens_ + std::chrono::duration<double>(now - bucket_time_).count() * rate);
  bucket_time_ = now;
  if (bucket_tokens_ >= 1) {
    bucket_tokens_ -= 1;
    return true;
  }
  *retry_after_s = (1 - bucket_tokens_) / rate;
  return false;
}

json ApiService::BrowserReadyJson(const SandboxRecord& r) const {
  if (r.state != "running" && r.state != "paused") return nullptr;
  auto sb = manager_.Find(r.id);
  return sb && !sb->browser_refreshing;
}

json ApiService::SandboxJson(const SandboxRecord& r) const {
  json metadata = json::object();
  if (auto m = ParseJson(r.metadata_json); m && m->is_object()) metadata = *m;
  json egress = nullptr;
  if (!r.egress_json.empty())
    if (auto e = ParseJson(r.egress_json)) egress = *e;
  return json{{"id", r.id},
              {"state", r.state},
              {"template", r.template_name},
              {"resolution", {{"width", r.width}, {"height", r.height}}},
              {"display", r.display_w ? json{{"width", r.display_w}, {"height", r.display_h}} : json(nullptr)},
              {"timeout_s", r.timeout_s},
              {"on_timeout", r.on_timeout},
              {"expires_at", TimeOrNull(r.state == "running" ? r.expires_at_ms : 0)},
              {"created_at", Rfc3339(r.created_at_ms)},
              {"updated_at", Rfc3339(r.updated_at_ms)},
              {"stopped_at", TimeOrNull(r.stopped_at_ms)},
              {"metadata", metadata},
              {"egress", egress},
              {"failure", r.failure.empty() ? json(nullptr) : json(r.failure)},
              {"create_path", r.create_path},
              {"create_ms", r.create_ms},
              {"browser_ready", BrowserReadyJson(r)},
              {"events_url", "/v1/sandboxes/" + r.id + "/events"}};
}

std::expected<SandboxRecord*, HttpResponse> ApiService::FindRecord(const std::string& id) {
  auto it = records_.find(id);
  if (it == records_.end()) return std::unexpected(Error(404, "not_found", fmt::format("no sandbox '{}'", id)));
  return &it->second;
}

std::expected<std::shared_ptr<vmhost::Sandbox>, HttpResponse> ApiService::RunningSandbox(const std::string& id) {
  auto r = FindRecord(id);
  if (!r) return std::unexpected(r.error());
  if ((*r)->state != "running")
    return std::unexpected(Error(409, "invalid_state", fmt::format("sandbox {} is {}; it must be running", id, (*r)->state)));
  auto sb = manager_.Find(id);
  if (!sb || !sb->agent || sb->agent->closed())
    return std::unexpected(Error(502, "guest_error", fmt::format("sandbox {} has no guest agent connection", id)));
  return sb;
}

asio::awaitable<std::expected<json, HttpResponse>> ApiService::ReadJson(Call& c) {
  auto body = co_await c.ex.ReadBody(kMaxJsonBody);
  if (!body) {
    if (body.error().code == BodyError::Code::kTooLarge)
      co_return std::unexpected(Error(413, "payload_too_large",
                                      fmt::format("JSON bodies are limited to {} bytes", kMaxJsonBody)));
    co_return std::unexpected(FromBodyError(body.error()));
  }
  if (body->empty()) co_return json::object();
  auto j = ParseJson(*body);
  if (!j) co_return std::unexpected(Error(400, "invalid_json", j.error()));
  co_return std::move(*j);
}

// ---------------------------------------------------------------------------------------------
// Dispatch

asio::awaitable<HttpResponse> ApiService::Handle(Exchange& ex) {
  auto t0 = std::chrono::steady_clock::now();
  Call call{ex};
  call.request_id = NewId("req_");
  const Route* route = nullptr;
  std::string allowed;
  for (const auto& r : Routes()) {
    std::string id, target;
    if (!Match(r.pattern, ex.path(), r.trailing_slash, id, target)) continue;
    if (r.method == ex.method()) {
      route = &r;
      call.id = id;
      call.target = target;
      break;
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string(boost::beast::http::to_string(r.method));
  }
  HttpResponse res;
  std::string label = route ? route->pattern : "unmatched";
  if (!route) {
    res = allowed.empty() ? Error(404, "not_found", fmt::format("no route {}", std::string(ex.path())))
                          : Error(405, "method_not_allowed",
                                  fmt::format("{} is not allowed on this route (allowed: {})",
                                              std::string(ex.method_string()), allowed));
    if (!allowed.empty()) res.headers.emplace_back("Allow", allowed);
  } else {
    call.route = route;
    std::optional<HttpResponse> denied;
    if (ex.query_malformed()) denied = Error(400, "invalid_request", "the query string has a bad %-escape");
    if (!denied && !ex.duplicates().empty())
      denied = Error(400, "invalid_request", fmt::format("query parameter '{}' is given twice", ex.duplicates()[0]));
    if (!denied && !route->open) {
      std::string_view auth = ex.header("Authorization");
      auto q = ex.query().find("token");
      std::string secret;
      if (q != ex.query().end() && !route->token_in_query) {
        denied = Error(401, "unauthorized",
                       "credentials are not accepted in the query string on this route; send "
                       "'Authorization: Bearer <key or token>'");
      } else if (!auth.empty()) {
        if (auth.size() < 7 || !boost::beast::iequals(auth.substr(0, 7), "Bearer "))
          denied = Error(401, "unauthorized", "the Authorization header must be 'Bearer <key or token>'");
        else
          secret = std::string(auth.substr(7));
      } else if (q != ex.query().end()) {
        secret = q->second;
        call.query_token = secret;
      } else if (auto cookie = route->token_in_cookie ? CookieValue(ex.header("Cookie"), kViewCookie) : "";
                 !cookie.empty()) {
        secret = cookie;
      } else {
        denied = Error(401, "unauthorized", "missing 'Authorization: Bearer <key or token>'");
      }
      if (!denied) {
        call.secret = secret;
        auto p = credentials_.Authenticate(secret, NowMs());
        if (!p) denied = Error(401, "unauthorized", "the key or token is not valid (unknown, revoked or expired)");
        else call.principal = *p;
      }
      if (!denied && call.principal.kind == Principal::Kind::kToken) {
        const auto& sc = route->scopes;
        if (std::find(sc.begin(), sc.end(), call.principal.scope) == sc.end())
          denied = Error(403, "forbidden",
                         fmt::format("a {} token may not use {} {}", ToString(call.principal.scope),
                                     std::string(ex.method_string()), route->pattern));
        else if (call.principal.sandbox_id != call.id)
          denied = Error(403, "forbidden", "this token belongs to another sandbox");
      }
    }
    if (denied) res = std::move(*denied);
    else res = co_await (this->*(route->handler))(call);
  }
  res.headers.emplace_back("X-Request-Id", call.request_id);
  res.headers.emplace_back("Cache-Control", "no-store");
  res.headers.emplace_back("X-Content-Type-Options", "nosniff");
  metrics_.CountRequest(std::string(ex.method_string()), label, res.status);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The path only: query strings may carry tokens, which never reach a log.
  log::Info(kLog, "{} {} {} {} {:.1f} ms {}", call.request_id, std::string(ex.method_string()), label, res.status, ms,
            call.principal.id);
  co_return res;
}

// ---------------------------------------------------------------------------------------------
// Handlers

asio::awaitable<HttpResponse> ApiService::Health(Call&) { co_return Json(200, {{"status", "ok"}}); }

asio::awaitable<HttpResponse> ApiService::ListTemplates(Call&) {
  const auto& m = manager_.manifest();
  json t = {{"name", config_.template_name},
            {"default", true},
            {"screen", {{"width", m.screen_width()}, {"height", m.screen_height()}}},
            {"memory_mib", m.memory_mib()},
            {"vcpus", m.smp()},
            {"qemu_version", m.qemu_version()},
            {"accelerator", manager_.accelerator()},
            {"chromium_version", m.chromium_version()},
            {"created_at", Rfc3339(m.created_unix_s() * 1000)}};
  co_return Json(200, {{"templates", json::array({t})}});
}

asio::awaitable<std::expected<void, std::string>> ApiService::Resize(vmhost::Sandbox& sb, uint32_t w, uint32_t h) {
  // Xvnc resizes its framebuffer through RANDR to any mode of its output; a size not listed
  // yet is added as a mode first (Xvnc ignores the timings). Openbox re-fits maximized windows.
  static constexpr char kScript[] =
      "export DISPLAY=:0; M=\"${1}x${2}\"; "
      "xrandr -q | grep -q \"^ *$M \" || { xrandr --newmode \"$M\" 60 $1 $1 $1 $1 $2 $2 $2 $2 && "
      "xrandr --addmode VNC-0 \"$M\"; } && xrandr --output VNC-0 --mode \"$M\" && "
      "xdpyinfo | grep -q \"dimensions: *$M \"";
  agent::v1::Request req;
  auto* e = req.mutable_exec();
  e->add_argv("/bin/sh");
  e->add_argv("-c");
  e->add_argv(kScript);
  e->add_argv("sh");
  e->add_argv(std::to_string(w));
  e->add_argv(std::to_string(h));
  e->set_timeout_s(15);
  auto r = co_await sb.agent->Call(std::move(req), 20s);
  if (!r) co_return std::unexpected(r.error().message);
  if (r->exec().exit_code() != 0)
    co_return std::unexpected(fmt::format("the display refused {}x{}: {}", w, h, r->exec().stderr().substr(0, 300)));
  co_return std::expected<void, std::string>{};
}

asio::awaitable<HttpResponse> ApiService::CreateSandbox(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto tpl = in.String("template", 1, 128);
  uint32_t width = manager_.manifest().screen_width(), height = manager_.manifest().screen_height();
  bool resize = false;
  if (const json* res = in.Object("resolution")) {
    ObjectReader rr(*res, "resolution");
    auto w = rr.Integer("width", 1, 100000);
    auto h = rr.Integer("height", 1, 100000);
    if (rr.ok() && (!w || !h)) rr.Fail("resolution needs width and height");
    if (auto e = rr.Finish()) in.Fail(*e);
    if (w && h) {
      width = static_cast<uint32_t>(*w);
      height = static_cast<uint32_t>(*h);
      resize = width != manager_.manifest().screen_width() || height != manager_.manifest().screen_height();
    }
  }
  auto timeout = in.Integer("timeout_s", 1, config_.max_timeout_s);
  auto on_timeout = in.Enum("on_timeout", {"pause", "stop"});
  json metadata = ReadMetadata(in).value_or(json::object());
  auto display = ReadDisplayMember(in);
  egress::Policy policy{EgressDefault(), {}, {}};
  if (const json* e = in.Any("egress")) {
    auto p = egress::ParsePolicy(*e, policy.default_action);
    if (!p) in.Fail(p.error());
    else policy = std::move(*p);
  }
  std::string egress = Dump(egress::PolicyJson(policy));
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  if (tpl && *tpl != config_.template_name)
    co_return Error(422, "unknown_template", fmt::format("template '{}' is not served here (GET /v1/templates)", *tpl));
  if (width < 320 || width > 3840 || height < 240 || height > 2160 || width % 2 || height % 2)
    co_return Error(422, "unsupported_resolution",
                    fmt::format("{}x{} is not supported: width 320..3840 and height 240..2160, both even", width, height));
  double retry = 0;
  if (!RateLimitAllows(&retry)) {
    auto r = Error(429, "rate_limited",
                   fmt::format("more than {} creates per second; retry in {:.1f} s", config_.creates_per_second, retry));
    r.headers.emplace_back("Retry-After", std::to_string(static_cast<int>(std::ceil(retry))));
    co_return r;
  }
  if (AliveCount() >= config_.max_sandboxes)
    co_return Error(429, "sandbox_limit",
                    fmt::format("{} sandboxes are alive, the limit is {}; delete one first", AliveCount(),
                                config_.max_sandboxes));

  auto t0 = std::chrono::steady_clock::now();
  ++creating_;
  auto sb = co_await manager_.Create();
  --creating_;
  if (!sb) co_return FromVmError(sb.error());
  if (resize) {
    auto r = co_await Resize(**sb, width, height);
    if (!r) {
      co_await manager_.Destroy((*sb)->id);
      co_return Error(422, "unsupported_resolution", r.error());
    }
  }
  // The policy is in force before the client hears of the sandbox.
  if (auto a = co_await AttachEgress((*sb)->id, (*sb)->slot, egress); !a) {
    egress_->Detach((*sb)->id);
    co_await manager_.Destroy((*sb)->id);
    co_return Error(500, "internal", fmt::format("egress for the new sandbox: {}", a.error()));
  }
  DetachIfGone((*sb)->id);
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  metrics_.ObserveCreate(ms / 1000, std::string(vmhost::ToString((*sb)->path)));
  SandboxRecord r;
  r.id = (*sb)->id;
  r.state = "running";
  r.template_name = config_.template_name;
  r.slot = (*sb)->slot;
  r.qemu_pid = (*sb)->qemu_pid;
  r.width = width;
  r.height = height;
  r.timeout_s = static_cast<uint32_t>(timeout.value_or(config_.default_timeout_s));
  r.on_timeout = on_timeout.value_or("pause");
  r.created_at_ms = NowMs();
  r.expires_at_ms = r.created_at_ms + int64_t{r.timeout_s} * 1000;
  r.metadata_json = Dump(metadata);
  if (display) {
    r.display_w = display->first;
    r.display_h = display->second;
  }
  r.egress_json = egress;
  r.create_path = std::string(vmhost::ToString((*sb)->path));
  r.create_ms = std::round(ms * 10) / 10;
  r.owner = c.principal.id;
  r.browser_refreshing = (*sb)->browser_refreshing;
  if ((*sb)->state != SandboxState::kRunning) {
    // It died between restore and now: keep the record, say so.
    r.state = "failed";
    r.failure = (*sb)->failure;
    r.expires_at_ms = 0;
  }
  auto& rec = records_[r.id] = std::move(r);
  Save(rec);
  EmitLifecycle(rec, &c, "", rec.state, "api",
                fmt::format("created from {} ({}, {:.0f} ms)", rec.template_name, rec.create_path, ms));
  log::Info(kLog, "sandbox {} created ({}, {:.0f} ms)", rec.id, rec.create_path, ms);
  co_return Json(201, SandboxJson(rec));
}

asio::awaitable<HttpResponse> ApiService::ListSandboxes(Call& c) {
  std::optional<std::string> state;
  for (const auto& [k, v] : c.ex.query()) {
    if (k == "state") {
      if (v != "creating" && v != "running" && v != "paused" && v != "failed" && v != "stopped")
        co_return Error(400, "invalid_request", fmt::format("state must be creating, running, paused, failed or stopped (got '{}')", v));
      state = v;
    } else {
      co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
    }
  }
  json list = json::array();
  std::vector<const SandboxRecord*> sorted;
  for (const auto& [id, r] : records_) {
    if (state ? r.state != *state : r.state == "stopped") continue;
    sorted.push_back(&r);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->created_at_ms < b->created_at_ms; });
  for (auto* r : sorted) list.push_back(SandboxJson(*r));
  co_return Json(200, {{"sandboxes", list}});
}

asio::awaitable<HttpResponse> ApiService::GetSandbox(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  co_return Json(200, SandboxJson(**r));
}

asio::awaitable<HttpResponse> ApiService::PatchSandbox(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto timeout = in.Integer("timeout_s", 1, config_.max_timeout_s);
  std::optional<json> metadata = ReadMetadata(in);
  bool display_given = body->is_object() && body->contains("display");  // null too: it clears
  auto display = ReadDisplayMember(in);  // null clears it
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  SandboxRecord& rec = **r;
  if (rec.state == "stopped" || rec.state == "failed")
    co_return Error(409, "invalid_state", fmt::format("sandbox {} is {}", rec.id, rec.state));
  if (timeout) {
    rec.timeout_s = static_cast<uint32_t>(*timeout);
    if (rec.state == "running") rec.expires_at_ms = NowMs() + *timeout * 1000;
  }
  if (metadata) rec.metadata_json = Dump(*metadata);
  if (display_given) {
    rec.display_w = display ? display->first : 0;
    rec.display_h = display ? display->second : 0;
  }
  Save(rec);
  co_return Json(200, SandboxJson(rec));
}

asio::awaitable<HttpResponse> ApiService::DeleteSandbox(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  SandboxRecord& rec = **r;
  if (rec.state == "stopped") co_return NoContent();
  if (busy_.count(rec.id)) co_return Error(409, "invalid_state", fmt::format("sandbox {} is busy; retry", rec.id));
  std::string from = rec.state;
  std::string detail;
  EndCdpSessions(rec.id, "sandbox stopped");
  if (rec.state != "failed") {
    auto d = co_await manager_.Destroy(rec.id);
    if (!d && d.error().code != vmhost::VmError::Code::kNotFound) detail = d.error().message;
  }
  auto again = records_.find(c.id);
  if (again == records_.end()) co_return NoContent();
  SandboxRecord& now = again->second;
  now.state = "stopped";
  now.stopped_at_ms = NowMs();
  now.expires_at_ms = 0;
  Save(now);
  EmitLifecycle(now, &c, from, "stopped", "api", detail);
  co_return NoContent();
}

asio::awaitable<HttpResponse> ApiService::PauseSandbox(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  if ((*r)->state != "running")
    co_return Error(409, "invalid_state", fmt::format("sandbox {} is {}; only a running sandbox can be paused", c.id, (*r)->state));
  if (busy_.count(c.id)) co_return Error(409, "invalid_state", fmt::format("sandbox {} is busy; retry", c.id));
  busy_.insert(c.id);
  EndCdpSessions(c.id, "sandbox paused");
  auto p = co_await manager_.Pause(c.id);
  busy_.erase(c.id);
  if (!p) co_return FromVmError(p.error());
  auto rec = FindRecord(c.id);
  if (!rec) co_return rec.error();
  (*rec)->state = "paused";
  (*rec)->expires_at_ms = 0;
  Save(**rec);
  EmitLifecycle(**rec, &c, "running", "paused", "api");
  co_return Json(200, SandboxJson(**rec));
}

asio::awaitable<HttpResponse> ApiService::ResumeSandbox(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  if ((*r)->state != "paused")
    co_return Error(409, "invalid_state", fmt::format("sandbox {} is {}; only a paused sandbox can be resumed", c.id, (*r)->state));
  if (busy_.count(c.id)) co_return Error(409, "invalid_state", fmt::format("sandbox {} is busy; retry", c.id));
  busy_.insert(c.id);
  auto p = co_await manager_.Resume(c.id);
  busy_.erase(c.id);
  auto rec = FindRecord(c.id);
  if (!rec) co_return rec.error();
  auto sb = manager_.Find(c.id);
  if (sb && sb->state == SandboxState::kRunning && (*rec)->state == "paused") {
    (*rec)->state = "running";
    (*rec)->expires_at_ms = NowMs() + int64_t{(*rec)->timeout_s} * 1000;
    Save(**rec);
    EmitLifecycle(**rec, &c, "paused", "running", "api", p ? "resumed" : "resumed; " + p.error().message);
  }
  if (!p) co_return FromVmError(p.error());
  co_return Json(200, SandboxJson(**rec));
}

asio::awaitable<HttpResponse> ApiService::Exec(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  agent::v1::Request req;
  auto* e = req.mutable_exec();
  recorder::v1::Event ev;
  if (const json* argv = in.Array("argv")) {
    if (argv->empty() || argv->size() > 4096) in.Fail("argv must have 1 to 4096 elements");
    for (const auto& a : *argv) {
      if (!a.is_string()) {
        in.Fail("argv elements must be strings");
        break;
      }
      e->add_argv(a.get<std::string>());
      ev.mutable_exec()->add_argv(a.get<std::string>());
    }
  }
  auto shell = in.String("shell", 1, 256 * 1024);
  if (shell) {
    e->set_shell(*shell);
    ev.mutable_exec()->set_shell(*shell);
  }
  if (in.ok() && e->argv_size() > 0 && shell) in.Fail("give either argv or shell, not both");
  if (in.ok() && e->argv_size() == 0 && !shell) in.Fail("argv or shell is required");
  if (const json* env = in.Object("env")) {
    for (auto it = env->begin(); it != env->end() && in.ok(); ++it) {
      if (!it->is_string()) in.Fail(fmt::format("env.{} must be a string", it.key()));
      else if (it.key().empty() || it.key().find('=') != std::string::npos || it.key().find('\0') != std::string::npos)
        in.Fail(fmt::format("env name '{}' is not valid", it.key()));
      else (*e->mutable_env())[it.key()] = it->get<std::string>();
    }
  }
  if (auto cwd = in.String("cwd", 1, kMaxPathBytes)) {
    if ((*cwd)[0] != '/') in.Fail("cwd must be an absolute path");
    e->set_cwd(*cwd);
  }
  if (auto in_b64 = in.String("stdin_b64", 0, kMaxJsonBody)) {
    std::string decoded;
    decoded.resize(in_b64->size() / 4 * 3 + 3);
    int n = in_b64->empty() ? 0
                            : EVP_DecodeBlock(reinterpret_cast<unsigned char*>(decoded.data()),
                                              reinterpret_cast<const unsigned char*>(in_b64->data()),
                                              static_cast<int>(in_b64->size()));
    if (n < 0 || in_b64->size() % 4 != 0) in.Fail("stdin_b64 is not valid base64");
    else {
      size_t pad = 0;
      if (!in_b64->empty() && in_b64->back() == '=') ++pad;
      if (in_b64->size() > 1 && (*in_b64)[in_b64->size() - 2] == '=') ++pad;
      decoded.resize(static_cast<size_t>(n) - pad);
      e->set_stdin(decoded);
    }
  }
  auto timeout = in.Integer("timeout_s", 1, 3600);
  e->set_timeout_s(static_cast<uint32_t>(timeout.value_or(60)));
  auto encoding = in.Enum("encoding", {"utf8", "base64"}).value_or("utf8");
  if (auto m = in.Integer("max_output_bytes", 1, 6 << 20)) e->set_max_output_bytes(static_cast<uint64_t>(*m));
  if (auto err = in.Finish()) co_return Error(400, "invalid_request", *err);
  auto sb = RunningSandbox(c.id);
  if (!sb) co_return sb.error();
  auto keep = *sb;  // the agent client lives as long as this call
  auto r = co_await keep->agent->Call(std::move(req), std::chrono::seconds(e->timeout_s() + 15));
  if (!r) co_return FromAgentError(r.error());
  const auto& x = r->exec();
  auto* xe = ev.mutable_exec();
  xe->set_exit_code(x.exit_code());
  xe->set_signal(x.signal());
  xe->set_duration_ms(static_cast<uint32_t>(x.duration_ms()));
  xe->set_timed_out(x.timed_out());
  xe->set_stdout_bytes(x.stdout().size());
  xe->set_stderr_bytes(x.stderr().size());
  ev.set_sandbox_id(c.id);
  FillActor(ev, &c);
  events_.Emit(std::move(ev));
  auto text = [&](const std::string& s) -> json {
    if (encoding == "utf8") return s;  // Dump() replaces invalid UTF-8
    std::string out(4 * ((s.size() + 2) / 3) + 1, '\0');
    int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                            reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
    out.resize(static_cast<size_t>(n));
    return out;
  };
  co_return Json(200, {{"exit_code", x.exit_code()},
                       {"signal", x.signal()},
                       {"stdout", text(x.stdout())},
                       {"stderr", text(x.stderr())},
                       {"encoding", encoding},
                       {"truncated", x.truncated()},
                       {"timed_out", x.timed_out()},
                       {"duration_ms", x.duration_ms()}});
}

namespace {
std::optional<std::string> FileQuery(const Exchange& ex, std::string* path, std::set<std::string> allowed) {
  for (const auto& [k, v] : ex.query())
    if (!allowed.count(k)) return fmt::format("unknown query parameter '{}'", k);
  auto it = ex.query().find("path");
  *path = it == ex.query().end() ? "" : it->second;
  return CheckGuestPath(*path);
}

// Which 400 a bad files query gets: a missing path is an incomplete request, a bad one a bad path.
HttpResponse FileQueryError(const Exchange& ex, const std::string& message) {
  bool has_path = ex.query().count("path") && !ex.query().at("path").empty();
  bool unknown = message.starts_with("unknown query parameter");
  return Error(400, has_path && !unknown ? "invalid_path" : "invalid_request", message);
}
}  // namespace

asio::awaitable<HttpResponse> ApiService::PutFile(Call& c) {
  std::string path;
  if (auto bad = FileQuery(c.ex, &path, {"path", "mode", "parents"})) co_return FileQueryError(c.ex, *bad);
  uint32_t mode = 0644;
  if (auto m = c.ex.query().find("mode"); m != c.ex.query().end()) {
    const std::string& v = m->second;
    if (v.size() < 3 || v.size() > 4 || v.find_first_not_of("01234567") != std::string::npos)
      co_return Error(400, "invalid_request", "mode must be octal permission bits such as 0644");
    mode = static_cast<uint32_t>(std::stoul(v, nullptr, 8));
  }
  bool parents = false;
  if (auto p = c.ex.query().find("parents"); p != c.ex.query().end()) {
    if (p->second != "1" && p->second != "0" && p->second != "true" && p->second != "false")
      co_return Error(400, "invalid_request", "parents must be 1 or 0");
    parents = p->second == "1" || p->second == "true";
  }
  if (auto cl = c.ex.content_length(); cl && *cl > kMaxFileBytes)
    co_return Error(413, "payload_too_large", fmt::format("files are limited to {} bytes", kMaxFileBytes));
  auto sb = RunningSandbox(c.id);
  if (!sb) co_return sb.error();
  auto keep = *sb;
  auto stream = keep->agent->OpenStream();
  constexpr size_t kChunk = 256 * 1024;
  std::string buf(kChunk, '\0');
  uint64_t offset = 0;
  std::optional<HttpResponse> failed;
  std::string pending;  // one chunk held back so the last one can be marked
  bool ended = false;
  while (!ended) {
    auto n = co_await c.ex.ReadSome(std::span<char>(buf.data(), buf.size()), kMaxFileBytes);
    if (!n) {
      failed = n.error().code == BodyError::Code::kTooLarge
                   ? Error(413, "payload_too_large", fmt::format("files are limited to {} bytes", kMaxFileBytes))
                   : FromBodyError(n.error());
      break;
    }
    ended = *n == 0;
    pending.append(buf.data(), *n);
    while (pending.size() >= kChunk || (ended && (!pending.empty() || offset == 0 || true))) {
      size_t take = std::min(pending.size(), kChunk);
      bool last = ended && take == pending.size();
      agent::v1::Request req;
      auto* w = req.mutable_file_write();
      w->set_path(path);
      w->set_offset(offset);
      w->set_data(pending.substr(0, take));
      w->set_last(last);
      w->set_mode(mode);
      w->set_create_parents(parents);
      auto s = co_await stream->Send(std::move(req));
      if (!s) {
        failed = FromAgentError(s.error(), true);
        break;
      }
      offset += take;
      pending.erase(0, take);
      if (last) break;
    }
    if (failed) break;
  }
  recorder::v1::Event ev;
  ev.set_sandbox_id(c.id);
  FillActor(ev, &c);
  auto* f = ev.mutable_file();
  f->set_direction("upload");
  f->set_path(path);
  if (!failed) {
    auto ack = co_await stream->Next(120s);
    if (!ack) failed = Error(502, "guest_error", "the guest agent ended the write without an answer");
    else if (!*ack) failed = FromAgentError(ack->error(), true);
  }
  f->set_bytes(offset);
  f->set_ok(!failed);
  if (failed) f->set_error(ParseJson(failed->body).value_or(json::object())["error"].value("message", ""));
  events_.Emit(std::move(ev));
  if (failed) co_return *failed;
  co_return Json(200, {{"path", path}, {"bytes", offset}});
}

asio::awaitable<HttpResponse> ApiService::GetFile(Call& c) {
  std::string path;
  if (auto bad = FileQuery(c.ex, &path, {"path"})) co_return FileQueryError(c.ex, *bad);
  auto sb = RunningSandbox(c.id);
  if (!sb) co_return sb.error();
  auto keep = *sb;
  std::shared_ptr<vmhost::AgentClient::Stream> stream = keep->agent->OpenStream();
  agent::v1::Request req;
  req.mutable_file_read()->set_path(path);
  req.mutable_file_read()->set_chunk_bytes(256 * 1024);
  auto fail_event = [&](const std::string& why) {
    recorder::v1::Event ev;
    ev.set_sandbox_id(c.id);
    FillActor(ev, &c);
    ev.mutable_file()->set_direction("download");
    ev.mutable_file()->set_path(path);
    ev.mutable_file()->set_error(why);
    events_.Emit(std::move(ev));
  };
  if (auto s = co_await stream->Send(std::move(req)); !s) co_return FromAgentError(s.error(), true);
  auto first = co_await stream->Next(60s);
  if (!first || !*first) {
    auto err = !first ? vmhost::AgentError{vmhost::AgentError::Code::kClosed, "no answer from the guest agent"}
                      : first->error();
    fail_event(err.message);
    co_return FromAgentError(err, true);
  }
  if ((*first)->file_chunk().total_size() > kMaxFileBytes) {
    fail_event("file too large");
    co_return Error(413, "payload_too_large", fmt::format("files are limited to {} bytes", kMaxFileBytes));
  }
  HttpResponse res;
  res.content_type = "application/octet-stream";
  res.headers.emplace_back("X-File-Size", std::to_string((*first)->file_chunk().total_size()));
  auto chunk = std::make_shared<agent::v1::Response>(std::move(**first));
  std::string id = c.id;
  recorder::v1::Event ev;
  ev.set_sandbox_id(c.id);
  FillActor(ev, &c);
  ev.mutable_file()->set_direction("download");
  ev.mutable_file()->set_path(path);
  res.stream = [this, keep, stream, chunk, ev](ChunkWriter& w) mutable -> asio::awaitable<void> {
    uint64_t bytes = 0;
    std::string error;
    agent::v1::Response cur = std::move(*chunk);
    for (;;) {
      const auto& fc = cur.file_chunk();
      bytes += fc.data().size();
      if (!(co_await w.Write(fc.data()))) {
        error = "client went away";
        break;
      }
      if (fc.final()) break;
      auto next = co_await stream->Next(60s);
      if (!next || !*next) {
        error = !next ? "the guest agent ended the read early" : next->error().message;
        break;
      }
      cur = std::move(**next);
    }
    auto* f = ev.mutable_file();
    f->set_bytes(bytes);
    f->set_ok(error.empty());
    f->set_error(error);
    events_.Emit(std::move(ev));
    // A failure after the head was sent can only be told by ending the body early: the
    // chunked stream then lacks its last chunk, which the client sees as an error.
    if (!error.empty()) w.Abort();
  };
  co_return res;
}

asio::awaitable<HttpResponse> ApiService::GetClipboard(Call& c) {
  auto sb = RunningSandbox(c.id);
  if (!sb) co_return sb.error();
  auto keep = *sb;
  agent::v1::Request req;
  req.mutable_clipboard_get();
  auto r = co_await keep->agent->Call(std::move(req), 15s);
  if (!r) co_return FromAgentError(r.error());
  co_return Json(200, {{"text", r->clipboard().text()}});
}

asio::awaitable<HttpResponse> ApiService::PutClipboard(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto text = in.String("text", 0, 1 << 20);
  if (in.ok() && !text) in.Fail("text is required");
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  auto sb = RunningSandbox(c.id);
  if (!sb) co_return sb.error();
  auto keep = *sb;
  agent::v1::Request req;
  req.mutable_clipboard_set()->set_text(*text);
  auto r = co_await keep->agent->Call(std::move(req), 15s);
  if (!r) co_return FromAgentError(r.error());
  co_return NoContent();
}

asio::awaitable<HttpResponse> ApiService::GetEvents(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  uint64_t since = 0, limit = 1000;
  bool follow = false;
  for (const auto& [k, v] : c.ex.query()) {
    auto number = [&](uint64_t min, uint64_t max) -> std::optional<uint64_t> {
      if (v.empty() || v.size() > 19 || v.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
      uint64_t n = std::stoull(v);
      if (n < min || n > max) return std::nullopt;
      return n;
    };
    if (k == "since") {
      auto n = number(0, UINT64_MAX / 2);
      if (!n) co_return Error(400, "invalid_request", "since must be a sequence number (0 or more)");
      since = *n;
    } else if (k == "limit") {
      auto n = number(1, 10000);
      if (!n) co_return Error(400, "invalid_request", "limit must be between 1 and 10000");
      limit = *n;
    } else if (k == "follow") {
      if (v != "1" && v != "0" && v != "true" && v != "false")
        co_return Error(400, "invalid_request", "follow must be 1 or 0");
      follow = v == "1" || v == "true";
    } else {
      co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
    }
  }
  std::string path = events_.LogPath(c.id);
  if (!follow) {
    co_await FlushEvents();
    json list = json::array();
    uint64_t next = since;
    auto reader = recorder::EventLogReader::Open(path, {since, true});
    if (!reader && reader.error().code != recorder::EventLogError::Code::kNotFound)
      co_return Error(500, "internal", "event log: " + reader.error().message);
    if (reader) {
      while (list.size() < limit) {
        auto e = (*reader)->Next();
        if (!e) co_return Error(500, "internal", "event log: " + e.error().message);
        if (!*e) break;
        next = (*e)->seq();
        list.push_back(recorder::EventToJson(**e));
      }
    }
    co_return Json(200, {{"events", list}, {"next_since", next}});
  }
  // Follow: subscribe first, then read the file, then pass on what the subscription brings,
  // skipping what the file already gave. A seq gap means events were skipped: re-read the file.
  struct Queue {
    std::deque<recorder::Event> events;
    asio::steady_timer wake;
    explicit Queue(asio::any_io_executor ex) : wake(ex) {}
  };
  auto q = std::make_shared<Queue>(executor_);
  HttpResponse res;
  res.content_type = "application/x-ndjson";
  std::string id = c.id;
  res.stream = [this, q, since, path, id](ChunkWriter& w) -> asio::awaitable<void> {
    // Subscribed here, once the head is out, so that a client gone before then leaves nothing.
    uint64_t sub = events_.Subscribe(id, executor_, [q](const recorder::Event& e) {
      if (q->events.size() < 4096) q->events.push_back(e);
      q->wake.cancel();
    });
    uint64_t last = since;
    auto read_file = [&]() -> asio::awaitable<bool> {
      co_await FlushEvents();
      auto reader = recorder::EventLogReader::Open(path, {last, true});
      if (!reader) co_return reader.error().code == recorder::EventLogError::Code::kNotFound;
      for (;;) {
        auto e = (*reader)->Next();
        if (!e || !*e) co_return static_cast<bool>(e);
        last = (*e)->seq();
        if (!(co_await w.Write(recorder::ToJson(**e) + "\n"))) co_return false;
      }
    };
    bool ok = co_await read_file();
    while (ok && *alive_ && !w.ClientGone()) {
      while (ok && !q->events.empty()) {
        recorder::Event e = std::move(q->events.front());
        q->events.pop_front();
        if (e.seq() <= last) continue;
        if (e.seq() != last + 1) {
          ok = co_await read_file();
          continue;
        }
        last = e.seq();
        ok = co_await w.Write(recorder::ToJson(e) + "\n");
      }
      if (!ok) break;
      auto it = records_.find(id);
      bool ended = it == records_.end() || it->second.state == "stopped" || it->second.state == "failed";
      if (ended) {
        // Its last events may still be on their way to the file.
        ok = co_await read_file();
        if (q->events.empty()) break;
        continue;
      }
      q->wake.expires_after(1s);
      boost::system::error_code ec;
      co_await q->wake.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    }
    events_.Unsubscribe(sub);
  };
  co_return res;
}

asio::awaitable<HttpResponse> ApiService::CreateToken(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto scope = in.Enum("scope", {"view", "control", "cdp"});
  if (in.ok() && !scope) in.Fail("scope is required (view, control or cdp)");
  auto ttl = in.Integer("ttl_s", 1, 30 * 24 * 3600);
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  if ((*r)->state == "stopped" || (*r)->state == "failed")
    co_return Error(409, "invalid_state", fmt::format("sandbox {} is {}", c.id, (*r)->state));
  auto t = credentials_.CreateToken(c.id, *ParseScope(*scope), ttl.value_or(3600) * 1000, c.principal.id, NowMs());
  if (!t) co_return Error(500, "internal", t.error());
  const auto& [rec, secret] = *t;
  co_return Json(201, {{"id", rec.id},
                       {"token", secret},
                       {"scope", rec.scope},
                       {"sandbox_id", rec.sandbox_id},
                       {"created_at", Rfc3339(rec.created_at_ms)},
                       {"expires_at", Rfc3339(rec.expires_at_ms)}});
}

asio::awaitable<HttpResponse> ApiService::ListTokens(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  json list = json::array();
  for (const auto& t : credentials_.LiveTokens(c.id, NowMs()))
    list.push_back({{"id", t.id},
                    {"scope", t.scope},
                    {"sandbox_id", t.sandbox_id},
                    {"created_at", Rfc3339(t.created_at_ms)},
                    {"expires_at", Rfc3339(t.expires_at_ms)}});
  co_return Json(200, {{"tokens", list}});
}

asio::awaitable<HttpResponse> ApiService::DeleteToken(Call& c) {
  switch (credentials_.RevokeToken(c.id, NowMs())) {
    case Credentials::RevokeResult::kRevoked:
      viewers_->CloseActor(c.id, "the token was revoked");
      cdp_.CloseActor(c.id, "the token was revoked");
      co_return NoContent();
    case Credentials::RevokeResult::kNotFound: co_return Error(404, "not_found", fmt::format("no active token '{}'", c.id));
    default: co_return Error(500, "internal", "could not save the revocation");
  }
}

asio::awaitable<HttpResponse> ApiService::CreateKey(Call& c) {
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto name = in.String("name", 1, 64);
  if (in.ok() && !name) in.Fail("name is required");
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  auto k = credentials_.CreateKey(*name, NowMs());
  if (!k) co_return Error(500, "internal", k.error());
  const auto& [rec, secret] = *k;
  co_return Json(201, {{"id", rec.id}, {"name", rec.name}, {"key", secret}, {"created_at", Rfc3339(rec.created_at_ms)}});
}

asio::awaitable<HttpResponse> ApiService::ListKeys(Call&) {
  json list = json::array();
  for (const auto& k : credentials_.LiveKeys())
    list.push_back({{"id", k.id}, {"name", k.name}, {"created_at", Rfc3339(k.created_at_ms)}});
  co_return Json(200, {{"keys", list}});
}

asio::awaitable<HttpResponse> ApiService::DeleteKey(Call& c) {
  switch (credentials_.RevokeKey(c.id, NowMs())) {
    case Credentials::RevokeResult::kRevoked: co_return NoContent();
    case Credentials::RevokeResult::kNotFound: co_return Error(404, "not_found", fmt::format("no active key '{}'", c.id));
    case Credentials::RevokeResult::kLastKey:
      co_return Error(409, "last_key", "this is the only active API key; create another before revoking it");
    default: co_return Error(500, "internal", "could not save the revocation");
  }
}

asio::awaitable<HttpResponse> ApiService::GetMetrics(Call&) {
  std::map<std::string, Metrics::Gauge> g;
  auto& states = g["deskbox_sandboxes"];
  states.help = "Sandboxes by state (stopped ones are kept as records).";
  for (const char* s : {"creating", "running", "paused", "failed", "stopped"}) {
    double n = 0;
    for (const auto& [id, r] : records_) n += r.state == s;
    if (std::string_view(s) == "creating") n += static_cast<double>(creating_);
    states.samples.emplace_back(fmt::format("state=\"{}\"", s), n);
  }
  auto st = manager_.Stats();
  auto& pools = g["deskbox_pool_size"];
  pools.help = "VMs and network slots waiting in each pool.";
  pools.samples = {{"pool=\"warm\"", static_cast<double>(st.warm)},
                   {"pool=\"prestarted\"", static_cast<double>(st.prestarted)},
                   {"pool=\"netns\"", static_cast<double>(st.netns_ready)}};
  g["deskbox_free_slots"] = {"Network slots not in use.", {{"", static_cast<double>(st.free_slots)}}};
  auto& refreshes = g["deskbox_browser_refreshes"];
  refreshes.help = "Browser refreshes after hand-outs: running, and waiting for a turn.";
  refreshes.samples = {{"state=\"running\"", static_cast<double>(st.refreshes_running)},
                       {"state=\"waiting\"", static_cast<double>(st.refreshes_waiting)}};
  g["deskbox_sandboxes_trimmed"] = {"Running sandboxes idle with their translation cache handed back (TCG).",
                                    {{"", static_cast<double>(st.trimmed)}}};
  auto es = events_.stats();
  g["deskbox_events_written"] = {"Events appended to sandbox logs since start.", {{"", static_cast<double>(es.written)}}};
  g["deskbox_events_dropped"] = {"Events dropped (queue full, invalid, too large) since start.",
                                 {{"", static_cast<double>(es.dropped_queue_full + es.dropped_invalid + es.dropped_too_large)}}};
  g["deskbox_cdp_sessions"] = {"Open CDP WebSocket sessions.", {{"", static_cast<double>(cdp_.TotalSessions())}}};
  HttpResponse res;
  res.content_type = "text/plain; version=0.0.4; charset=utf-8";
  res.body = metrics_.Render(g);
  res.body += fmt::format(
      "# HELP deskbox_translation_cache_trims_total Idle sandboxes' translation caches handed back to the host (TCG).\n"
      "# TYPE deskbox_translation_cache_trims_total counter\n"
      "deskbox_translation_cache_trims_total {}\n",
      st.trims_total);
  res.body += "# HELP deskbox_cdp_messages_total CDP messages from clients to browsers, by method.\n"
              "# TYPE deskbox_cdp_messages_total counter\n";
  for (const auto& [method, n] : cdp_.method_counts())
    res.body += fmt::format("deskbox_cdp_messages_total{{method=\"{}\"}} {}\n", LabelValue(method), n);
  const auto& ec = egress_->counters();
  res.body += fmt::format(
      "# HELP deskbox_egress_dns_queries_total DNS queries from guests, by outcome.\n"
      "# TYPE deskbox_egress_dns_queries_total counter\n"
      "deskbox_egress_dns_queries_total{{outcome=\"allowed\"}} {}\n"
      "deskbox_egress_dns_queries_total{{outcome=\"denied\"}} {}\n"
      "deskbox_egress_dns_queries_total{{outcome=\"rate_limited\"}} {}\n"
      "# HELP deskbox_egress_dns_upstream_failures_total Upstream resolutions that failed.\n"
      "# TYPE deskbox_egress_dns_upstream_failures_total counter\n"
      "deskbox_egress_dns_upstream_failures_total {}\n"
      "# HELP deskbox_egress_connections_total TCP connections from guests, by outcome.\n"
      "# TYPE deskbox_egress_connections_total counter\n"
      "deskbox_egress_connections_total{{outcome=\"allowed\"}} {}\n"
      "deskbox_egress_connections_total{{outcome=\"denied\"}} {}\n"
      "# HELP deskbox_egress_bytes_total Bytes through the egress proxy, by direction (counted when a connection ends).\n"
      "# TYPE deskbox_egress_bytes_total counter\n"
      "deskbox_egress_bytes_total{{direction=\"up\"}} {}\n"
      "deskbox_egress_bytes_total{{direction=\"down\"}} {}\n"
      "# HELP deskbox_egress_packets_refused_total Packets the sandboxes' firewalls refused and logged (UDP, ICMP, ...).\n"
      "# TYPE deskbox_egress_packets_refused_total counter\n"
      "deskbox_egress_packets_refused_total {}\n"
      "# HELP deskbox_egress_connections_open TCP connections through the egress proxy now.\n"
      "# TYPE deskbox_egress_connections_open gauge\n"
      "deskbox_egress_connections_open {}\n",
      ec.dns_allowed, ec.dns_denied, ec.dns_rate_limited, ec.dns_upstream_failures, ec.connections_allowed,
      ec.connections_denied, ec.bytes_up, ec.bytes_down, ec.packets_refused, egress_->OpenConnections());
  co_return res;
}

// ---------------------------------------------------------------------------------------------
// Egress policy (docs/egress.md).

asio::awaitable<HttpResponse> ApiService::GetEgress(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  auto p = StoredPolicy((*r)->egress_json);
  if (!p) co_return Error(500, "internal", p.error());
  co_return Json(200, egress::PolicyJson(*p));
}

asio::awaitable<HttpResponse> ApiService::PutEgress(Call& c) {
  auto r = FindRecord(c.id);
  if (!r) co_return r.error();
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  auto again = records_.find(c.id);  // the record may have gone while the body was read
  if (again == records_.end()) co_return Error(404, "not_found", fmt::format("no sandbox {}", c.id));
  SandboxRecord& rec = again->second;
  auto p = egress::ParsePolicy(*body, EgressDefault());
  if (!p) co_return Error(400, "invalid_request", p.error());
  if (rec.state == "stopped" || rec.state == "failed")
    co_return Error(409, "invalid_state", fmt::format("sandbox {} is {}", rec.id, rec.state));
  json canonical = egress::PolicyJson(*p);
  rec.egress_json = Dump(canonical);
  Save(rec);
  egress_->SetPolicy(rec.id, std::move(*p));  // not attached while creating: the stored one is used
  recorder::v1::Event e;
  e.set_sandbox_id(rec.id);
  FillActor(e, &c);
  auto* d = e.mutable_egress();
  d->set_protocol("policy");
  d->set_phase("policy");
  d->set_allowed(true);
  d->set_reason(fmt::format("policy set: default {}, {} allow and {} deny rules", canonical["default"].get<std::string>(),
                            canonical["allow"].size(), canonical["deny"].size()));
  events_.Emit(std::move(e));
  co_return Json(200, canonical);
}

// ---------------------------------------------------------------------------------------------
// CDP (cdp-proxy): /json/* and the DevTools WebSockets of the sandbox's Chromium

asio::awaitable<std::expected<asio::ip::tcp::socket, std::string>> ApiService::DialCdpVersion(
    const std::string& sandbox_id) {
  auto sb = manager_.Find(sandbox_id);
  if (!sb || sb->state != SandboxState::kRunning) co_return std::unexpected(std::string("the sandbox is not running"));
  auto s = co_await manager_.ConnectGuest(sb->slot, cdp_proxy::kGuestCdpPort, 5s);
  if (!s) co_return std::unexpected(s.error().message);
  co_return std::move(*s);
}

asio::awaitable<std::expected<asio::ip::tcp::socket, std::string>> ApiService::DialCdp(const std::string& sandbox_id) {
  // Pages are reached only once none holds random state shared with other clones (a sandbox
  // restored for its create reloads them right after; vmhost WaitBrowserFresh).
  if (auto sb = manager_.Find(sandbox_id)) {
    if (auto fresh = co_await manager_.WaitBrowserFresh(sb, kBrowserFreshTimeout); !fresh)
      co_return std::unexpected(fresh.error().message);
  }
  co_return co_await DialCdpVersion(sandbox_id);
}

recorder::v1::Actor ApiService::ActorOf(const Call& c) const {
  recorder::v1::Event e;
  FillActor(e, &c);
  return e.actor();
}

void ApiService::EndCdpSessions(const std::string& id, const std::string& reason) {
  cdp_.CloseSandbox(id, reason);
  viewers_->CloseSandbox(id, reason);
}

cdp_proxy::PublicUrls ApiService::CdpUrls(const Call& c) const {
  // The host the client used to reach us (checked to be a plain host[:port]), else our address.
  std::string host(c.ex.header("Host"));
  bool ok = !host.empty() && host.size() <= 255 &&
            host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") ==
                std::string::npos;
  if (!ok) host = fmt::format("{}:{}", config_.listen_host, config_.listen_port);
  cdp_proxy::PublicUrls u;
  u.host_path = fmt::format("{}/v1/sandboxes/{}/cdp", host, c.id);
  u.ws_base = "ws://" + u.host_path;
  if (!c.query_token.empty()) u.query = "?token=" + c.query_token;
  return u;
}

asio::awaitable<std::expected<GuestHttpAnswerJson, HttpResponse>> ApiService::CdpGuestJson(
    Call& c, boost::beast::http::verb m, const std::string& target) {
  auto rec = FindRecord(c.id);
  if (!rec) co_return std::unexpected(rec.error());
  if ((*rec)->state != "running")
    co_return std::unexpected(Error(409, "invalid_state", fmt::format("sandbox {} is {}; its browser is not reachable", c.id, (*rec)->state)));
  auto a = co_await cdp_.GuestHttp(c.id, m, target);
  if (!a) co_return std::unexpected(Error(502, "guest_error", "the sandbox's browser: " + a.error()));
  co_return GuestHttpAnswerJson{a->status, std::move(a->body)};
}

asio::awaitable<HttpResponse> ApiService::CdpVersion(Call& c) {
  auto a = co_await CdpGuestJson(c, boost::beast::http::verb::get, "/json/version");
  if (!a) co_return a.error();
  auto v = cdp_proxy::SanitizeVersion(a->body, CdpUrls(c));
  if (!v) co_return Error(502, "guest_error", "the sandbox's browser gave a bad /json/version: " + v.error());
  co_return Json(200, v->body);
}

asio::awaitable<HttpResponse> ApiService::CdpList(Call& c) {
  auto a = co_await CdpGuestJson(c, boost::beast::http::verb::get, "/json/list");
  if (!a) co_return a.error();
  auto v = cdp_proxy::SanitizeTargets(a->body, CdpUrls(c));
  if (!v) co_return Error(502, "guest_error", "the sandbox's browser gave a bad /json/list: " + v.error());
  co_return Json(200, *v);
}

asio::awaitable<HttpResponse> ApiService::CdpNew(Call& c) {
  std::string url = "about:blank";
  for (const auto& [k, v] : c.ex.query()) {
    if (k == "url") url = v;
    else if (k != "token") co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
  }
  if (url.size() > 8192 || url.find_first_of(std::string("\r\n\0", 3)) != std::string::npos)
    co_return Error(400, "invalid_request", "url must be at most 8192 bytes without CR, LF or NUL");
  // Chromium takes the URL as the raw query string; escape what would end it.
  std::string escaped;
  for (unsigned char ch : url) {
    if (ch <= 0x20 || ch >= 0x7f || ch == '#' || ch == '%') escaped += fmt::format("%{:02X}", ch);
    else escaped += static_cast<char>(ch);
  }
  auto a = co_await CdpGuestJson(c, boost::beast::http::verb::put, "/json/new?" + escaped);
  if (!a) co_return a.error();
  if (a->status != 200) co_return Error(502, "guest_error", fmt::format("the sandbox's browser answered {}", a->status));
  auto v = cdp_proxy::SanitizeTarget(a->body, CdpUrls(c));
  if (!v) co_return Error(502, "guest_error", "the sandbox's browser gave a bad /json/new: " + v.error());
  co_return Json(200, *v);
}

// /json/activate/{target} and /json/close/{target}: the guest answers in plain text.
asio::awaitable<HttpResponse> ApiService::CdpTargetAction(Call& c, std::string action, std::string answer) {
  if (!cdp_proxy::IsValidTargetId(c.target)) co_return Error(404, "not_found", "no such target");
  auto a = co_await CdpGuestJson(c, boost::beast::http::verb::get, "/json/" + action + "/" + c.target);
  if (!a) co_return a.error();
  if (a->status == 404) co_return Error(404, "not_found", fmt::format("no target {}", c.target));
  if (a->status != 200) co_return Error(502, "guest_error", fmt::format("the sandbox's browser answered {}", a->status));
  HttpResponse r;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(answer);
  co_return r;
}

asio::awaitable<HttpResponse> ApiService::CdpActivate(Call& c) {
  co_return co_await CdpTargetAction(c, "activate", "Target activated");
}

asio::awaitable<HttpResponse> ApiService::CdpClose(Call& c) {
  co_return co_await CdpTargetAction(c, "close", "Target is closing");
}

HttpResponse ApiService::CdpWebSocket(Call& c, std::string guest_path) {
  HttpResponse r;
  r.status = 101;
  std::string id = c.id, request_id = c.request_id;
  recorder::v1::Actor actor = ActorOf(c);
  TokenExpiryWatch expiry(c.principal);
  r.upgrade = [this, id, guest_path, actor, request_id, expiry](
                  boost::beast::tcp_stream stream, boost::beast::http::request<boost::beast::http::buffer_body> req)
      -> asio::awaitable<void> {
    auto watch = expiry.Start(stream.get_executor(),
                              [this](const std::string& token) { cdp_.CloseActor(token, "the token expired"); });
    co_await cdp_.Run(std::move(stream), std::move(req), id, guest_path, actor, request_id);
  };
  return r;
}

asio::awaitable<HttpResponse> ApiService::CdpBrowser(Call& c) {
  auto rec = FindRecord(c.id);
  if (!rec) co_return rec.error();
  bool upgrade = boost::beast::iequals(c.ex.header("Upgrade"), "websocket");
  if (!upgrade) {
    // Plain GET of the endpoint: what /json/version says (so the URL itself is informative).
    if (!c.target.empty()) co_return Error(400, "invalid_request", "this is a WebSocket endpoint");
    co_return co_await CdpVersion(c);
  }
  if ((*rec)->state != "running")
    co_return Error(409, "invalid_state", fmt::format("sandbox {} is {}; its browser is not reachable", c.id, (*rec)->state));
  std::string browser = c.target;
  if (browser.empty()) {
    auto a = co_await CdpGuestJson(c, boost::beast::http::verb::get, "/json/version");
    if (!a) co_return a.error();
    auto v = cdp_proxy::SanitizeVersion(a->body, CdpUrls(c));
    if (!v) co_return Error(502, "guest_error", "the sandbox's browser gave a bad /json/version: " + v.error());
    browser = v->browser_id;
  } else if (!cdp_proxy::IsValidBrowserId(browser)) {
    co_return Error(404, "not_found", "no such browser endpoint");
  }
  co_return CdpWebSocket(c, "/devtools/browser/" + browser);
}

asio::awaitable<HttpResponse> ApiService::CdpPage(Call& c) {
  auto rec = FindRecord(c.id);
  if (!rec) co_return rec.error();
  if (!boost::beast::iequals(c.ex.header("Upgrade"), "websocket"))
    co_return Error(400, "invalid_request", "this is a WebSocket endpoint");
  if (!cdp_proxy::IsValidTargetId(c.target)) co_return Error(404, "not_found", "no such target");
  if ((*rec)->state != "running")
    co_return Error(409, "invalid_state", fmt::format("sandbox {} is {}; its browser is not reachable", c.id, (*rec)->state));
  co_return CdpWebSocket(c, "/devtools/page/" + c.target);
}

// ---------------------------------------------------------------------------------------------
// Timeouts

asio::awaitable<void> ApiService::TimeoutLoop(std::shared_ptr<bool> alive) {
  while (*alive) {
    clock_.expires_after(250ms);
    boost::system::error_code ec;
    co_await clock_.async_wait(asio::redirect_error(asio::use_awaitable, ec));
    if (!*alive) co_return;
    int64_t now = NowMs();
    std::vector<std::string> due;
    for (const auto& [id, r] : records_)
      if (r.state == "running" && r.expires_at_ms && r.expires_at_ms <= now && !busy_.count(id)) due.push_back(id);
    for (const auto& id : due) {
      auto it = records_.find(id);
      if (it == records_.end() || it->second.state != "running") continue;
      std::string action = it->second.on_timeout;
      busy_.insert(id);
      EndCdpSessions(id, action == "stop" ? "sandbox stopped: its timeout expired" : "sandbox paused: its timeout expired");
      std::string detail;
      bool done = false;
      if (action == "stop") {
        auto d = co_await manager_.Destroy(id);
        done = d || d.error().code == vmhost::VmError::Code::kNotFound;
        if (!d) detail = d.error().message;
      } else {
        auto p = co_await manager_.Pause(id);
        done = static_cast<bool>(p);
        if (!p) detail = p.error().message;
      }
      busy_.erase(id);
      if (!*alive) co_return;
      it = records_.find(id);
      if (it == records_.end()) continue;
      SandboxRecord& r = it->second;
      metrics_.CountTimeout(action);
      if (done && r.state == "running") {
        r.state = action == "stop" ? "stopped" : "paused";
        r.expires_at_ms = 0;
        if (action == "stop") r.stopped_at_ms = NowMs();
        Save(r);
        EmitLifecycle(r, nullptr, "running", r.state, "timeout",
                      fmt::format("timeout_s={} expired; on_timeout={}", r.timeout_s, action));
        log::Info(kLog, "sandbox {}: timeout, {}", id, r.state);
      } else if (!done) {
        log::Warn(kLog, "sandbox {}: timeout {} failed: {}", id, action, detail);
        r.expires_at_ms = NowMs() + 5000;  // try again shortly rather than spin
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

const std::vector<ApiService::Route>& ApiService::Routes() {
  using S = Scope;
  using A = ApiService;
  static const std::vector<ApiService::Route> routes = {
      {verb::get, "/healthz", {}, false, true, &A::Health},
      {verb::get, "/v1/templates", {}, false, false, &A::ListTemplates},
      {verb::post, "/v1/sandboxes", {}, false, false, &A::CreateSandbox},
      {verb::get, "/v1/sandboxes", {}, false, false, &A::ListSandboxes},
      {verb::get, "/v1/sandboxes/{id}", {S::kView, S::kControl}, false, false, &A::GetSandbox},
      {verb::patch, "/v1/sandboxes/{id}", {S::kControl}, false, false, &A::PatchSandbox},
      {verb::delete_, "/v1/sandboxes/{id}", {}, false, false, &A::DeleteSandbox},
      {verb::post, "/v1/sandboxes/{id}/pause", {S::kControl}, false, false, &A::PauseSandbox},
      {verb::post, "/v1/sandboxes/{id}/resume", {S::kControl}, false, false, &A::ResumeSandbox},
      {verb::post, "/v1/sandboxes/{id}/exec", {S::kControl}, false, false, &A::Exec},
      {verb::put, "/v1/sandboxes/{id}/files", {S::kControl}, false, false, &A::PutFile},
      {verb::get, "/v1/sandboxes/{id}/files", {S::kControl}, false, false, &A::GetFile},
      {verb::get, "/v1/sandboxes/{id}/clipboard", {S::kControl}, false, false, &A::GetClipboard},
      {verb::put, "/v1/sandboxes/{id}/clipboard", {S::kControl}, false, false, &A::PutClipboard},
      {verb::get, "/v1/sandboxes/{id}/events", {S::kView, S::kControl}, false, false, &A::GetEvents},
      {verb::get, "/v1/sandboxes/{id}/screenshot", {S::kView, S::kControl}, false, false, &A::Screenshot},
      {verb::post, "/v1/sandboxes/{id}/actions", {S::kControl}, false, false, &A::Actions},
      {verb::get, "/v1/sandboxes/{id}/cursor", {S::kView, S::kControl}, false, false, &A::Cursor},
      {verb::post, "/v1/sandboxes/{id}/computer/anthropic", {S::kControl}, false, false, &A::ComputerAnthropic},
      {verb::post, "/v1/sandboxes/{id}/computer/openai", {S::kControl}, false, false, &A::ComputerOpenAi},
      // The live view: browsers open these by URL, so the token comes in the query; the page's
      // WebSocket and modules use the cookie the page sets.
      {verb::get, "/v1/sandboxes/{id}/vnc", {S::kView, S::kControl}, true, false, &A::ViewerSocket, true, true},
      {verb::get, "/v1/sandboxes/{id}/view", {S::kView, S::kControl}, true, false, &A::ViewerPage},
      {verb::get, "/v1/sandboxes/{id}/view/novnc/{path}", {S::kView, S::kControl}, false, false, &A::ViewerAsset,
       false, true},
      // Egress: a control token may read the policy, only an API key may change it.
      {verb::get, "/v1/sandboxes/{id}/egress", {S::kControl}, false, false, &A::GetEgress},
      {verb::put, "/v1/sandboxes/{id}/egress", {}, false, false, &A::PutEgress},
      {verb::post, "/v1/sandboxes/{id}/tokens", {}, false, false, &A::CreateToken},
      {verb::get, "/v1/sandboxes/{id}/tokens", {}, false, false, &A::ListTokens},
      {verb::delete_, "/v1/tokens/{id}", {}, false, false, &A::DeleteToken},
      {verb::post, "/v1/keys", {}, false, false, &A::CreateKey},
      {verb::get, "/v1/keys", {}, false, false, &A::ListKeys},
      {verb::delete_, "/v1/keys/{id}", {}, false, false, &A::DeleteKey},
      {verb::get, "/metrics", {}, false, false, &A::GetMetrics},
      // CDP: browsers and WebSocket clients open these by URL, so a token may come in the query.
      {verb::get, "/v1/sandboxes/{id}/cdp", {S::kCdp}, true, false, &A::CdpBrowser, true},
      {verb::get, "/v1/sandboxes/{id}/cdp/json/version", {S::kCdp}, true, false, &A::CdpVersion, true},
      {verb::get, "/v1/sandboxes/{id}/cdp/json/list", {S::kCdp}, true, false, &A::CdpList, true},
      {verb::get, "/v1/sandboxes/{id}/cdp/json", {S::kCdp}, true, false, &A::CdpList, true},
      {verb::put, "/v1/sandboxes/{id}/cdp/json/new", {S::kCdp}, true, false, &A::CdpNew, true},
      {verb::get, "/v1/sandboxes/{id}/cdp/json/activate/{target}", {S::kCdp}, true, false, &A::CdpActivate, true},
      {verb::get, "/v1/sandboxes/{id}/cdp/json/close/{target}", {S::kCdp}, true, false, &A::CdpClose, true},
      {verb::get, "/v1/sandboxes/{id}/cdp/devtools/browser/{target}", {S::kCdp}, true, false, &A::CdpBrowser, true},
      {verb::get, "/v1/sandboxes/{id}/cdp/devtools/page/{target}", {S::kCdp}, true, false, &A::CdpPage, true},
  };
  return routes;
}

}  // namespace deskbox::api
