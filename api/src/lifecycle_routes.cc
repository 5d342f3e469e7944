#include "lifecycle_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "api/json_input.h"
#include "common/log.h"

namespace deskbox::api {

namespace asio = boost::asio;
using boost::beast::http::verb;
using nlohmann::json;
using namespace std::chrono_literals;
using vmhost::SandboxState;

namespace {

constexpr char kLifecycleLog[] = "api";

json TimeOrNull(int64_t ms) {
  return ms ? json(Rfc3339(ms)) : json(nullptr);
}
std::string StateName(SandboxState s) {
  return std::string(vmhost::ToString(s));
}

// The "metadata" field: string → string, at most 64 keys of 1..64 bytes, values ≤ 1024 bytes.
std::optional<json> ReadMetadata(ObjectReader& in) {
  const json* m = in.Object("metadata");
  if (!m) return std::nullopt;
  if (m->size() > 64) in.Fail("metadata has more than 64 keys");
  for (auto it = m->begin(); it != m->end() && in.ok(); ++it) {
    if (it.key().empty() || it.key().size() > 64)
      in.Fail("metadata keys must be 1 to 64 bytes long");
    else if (!it->is_string())
      in.Fail(fmt::format("metadata.{} must be a string", it.key()));
    else if (it->get_ref<const std::string&>().size() > 1024)
      in.Fail(fmt::format("metadata.{} is longer than 1024 bytes", it.key()));
  }
  return *m;
}

// A sandbox's limits (docs/limits.md): its QEMU's CPU share and cap on the host, and the
// limits of its guest's exec commands (the guest's user/exec cgroup).
struct Limits {
  vmhost::CpuLimits cpu;
  uint32_t exec_pids_max = 0;
  uint32_t exec_memory_mib = 0;
  uint32_t exec_disk_mib = 0;
  bool SameGuest(const Limits& o) const {
    return exec_pids_max == o.exec_pids_max && exec_memory_mib == o.exec_memory_mib &&
           exec_disk_mib == o.exec_disk_mib;
  }
};
// The guest's own defaults, which its init sets (desktop-images/image/rootfs/usr/lib/deskbox/init).
constexpr uint32_t kDefaultExecPids = 1024, kMinExecPids = 16, kMaxExecPids = 4096;
constexpr uint32_t kMinExecMemoryMib = 64;
// Root's files on the guest's disk may grow by this much (the agent's --exec-disk-mib); a value
// over the disk's free space (1 GiB in the image) is allowed and changes nothing.
constexpr uint32_t kDefaultExecDiskMib = 512, kMinExecDiskMib = 16, kMaxExecDiskMib = 1u << 20;

// What the template gives: its vCPUs (the CPU cap's default and maximum) and its RAM (the
// commands' memory: half by default, at most all).
struct TemplateSize {
  uint32_t vcpus;
  uint32_t memory_mib;
};
TemplateSize SizeOf(const vmhost::SandboxHost& m) {
  return {std::max(1u, m.manifest().smp()), static_cast<uint32_t>(std::max<uint64_t>(256, m.manifest().memory_mib()))};
}
Limits DefaultLimits(TemplateSize t) {
  return {.cpu = {.weight = vmhost::kDefaultCpuWeight, .max_millis = t.vcpus * 1000},
          .exec_pids_max = kDefaultExecPids,
          .exec_memory_mib = t.memory_mib / 2,
          .exec_disk_mib = kDefaultExecDiskMib};
}

// A sandbox's limits as in force: the record's, or the defaults where it has none.
Limits EffectiveLimits(const SandboxRecord& r, TemplateSize t) {
  Limits l = DefaultLimits(t);
  if (r.cpu_weight) l.cpu.weight = r.cpu_weight;
  if (r.cpu_max_millis) l.cpu.max_millis = r.cpu_max_millis;
  if (r.exec_pids_max) l.exec_pids_max = r.exec_pids_max;
  if (r.exec_memory_mib) l.exec_memory_mib = r.exec_memory_mib;
  if (r.exec_disk_mib) l.exec_disk_mib = r.exec_disk_mib;
  return l;
}

json LimitsJson(const Limits& l) {
  return {{"cpu_weight", l.cpu.weight},
          {"cpu_max", l.cpu.max_millis / 1000.0},
          {"exec_pids_max", l.exec_pids_max},
          {"exec_memory_mib", l.exec_memory_mib},
          {"exec_disk_mib", l.exec_disk_mib}};
}

void Record(SandboxRecord& r, const Limits& l) {
  r.cpu_weight = l.cpu.weight;
  r.cpu_max_millis = l.cpu.max_millis;
  r.exec_pids_max = l.exec_pids_max;
  r.exec_memory_mib = l.exec_memory_mib;
  r.exec_disk_mib = l.exec_disk_mib;
}

// What the guest is told to change from `was`: pids and memory always (idempotent writes), the
// disk limit only when it changes, so that a guest without a disk quota (a template built
// before it) still takes the others.
vmhost::GuestLimits GuestOf(const Limits& l, const Limits& was) {
  return {.exec_pids_max = l.exec_pids_max,
          .exec_memory_bytes = uint64_t{l.exec_memory_mib} << 20,
          .exec_disk_bytes = l.exec_disk_mib != was.exec_disk_mib ? uint64_t{l.exec_disk_mib} << 20 : 0};
}

// The `limits` member over `base` (what is in force): fields not given keep base's value.
// nullopt when there is no `limits` (or it is wrong: `in` has the error).
std::optional<Limits> ReadLimits(ObjectReader& in, Limits base, TemplateSize t) {
  const json* l = in.Object("limits");
  if (!l) return std::nullopt;
  ObjectReader lr(*l, "limits");
  if (auto w = lr.Integer("cpu_weight", vmhost::kMinCpuWeight, vmhost::kMaxCpuWeight))
    base.cpu.weight = static_cast<uint32_t>(*w);
  if (auto m = lr.Number("cpu_max", vmhost::kMinCpuMaxMillis / 1000.0, t.vcpus))
    base.cpu.max_millis = static_cast<uint32_t>(std::lround(*m * 1000));
  if (auto p = lr.Integer("exec_pids_max", kMinExecPids, kMaxExecPids)) base.exec_pids_max = static_cast<uint32_t>(*p);
  if (auto m = lr.Integer("exec_memory_mib", kMinExecMemoryMib, t.memory_mib))
    base.exec_memory_mib = static_cast<uint32_t>(*m);
  if (auto d = lr.Integer("exec_disk_mib", kMinExecDiskMib, kMaxExecDiskMib))
    base.exec_disk_mib = static_cast<uint32_t>(*d);
  if (auto e = lr.Finish()) {
    in.Fail(*e);
    return std::nullopt;
  }
  return base;
}

TransitionCause ByCall(const Call& c, std::string detail = "") {
  return {.reason = "api", .detail = std::move(detail), .base = c.NewEvent(c.id)};
}

}  // namespace

LifecycleRoutes::LifecycleRoutes(ApiContext& ctx, EgressBinding& egress)
    : ctx_(ctx),
      egress_(egress),
      bucket_tokens_(ctx.config.creates_per_second < 1 ? 1 : ctx.config.creates_per_second),
      bucket_time_(ctx.clock.Steady()) {
  ctx_.manager.SetObserver(
      [this](const vmhost::Sandbox& sb, SandboxState from) { OnVmTransition(sb, from); });
  // A refresh that ended is no longer one for the next deskboxd to do again.
  ctx_.manager.SetBrowserObserver([this](const vmhost::Sandbox& sb) {
    SandboxRecord* r = ctx_.sandboxes.Find(sb.id());
    if (!r || !r->browser_refreshing) return;
    r->browser_refreshing = false;
    ctx_.sandboxes.SaveOrRetry(*r);
  });
}

LifecycleRoutes::~LifecycleRoutes() {
  ctx_.manager.SetObserver(nullptr);
  ctx_.manager.SetBrowserObserver(nullptr);
}

void LifecycleRoutes::Register(Router& router) {
  using S = Scope;
  auto add = [&](verb m, const char* pattern, Access access, Reply (LifecycleRoutes::*h)(Call&)) {
    router.Add({.method = m,
                .pattern = pattern,
                .access = std::move(access),
                .handler = [this, h](Call& c) { return (this->*h)(c); }});
  };
  add(verb::get, "/v1/templates", Access::KeysOnly(), &LifecycleRoutes::ListTemplates);
  add(verb::post, "/v1/sandboxes", Access::KeysOnly(), &LifecycleRoutes::CreateSandbox);
  add(verb::get, "/v1/sandboxes", Access::KeysOnly(), &LifecycleRoutes::ListSandboxes);
  add(verb::get, "/v1/sandboxes/{id}", Access::Tokens({S::kView, S::kControl}),
      &LifecycleRoutes::GetSandbox);
  add(verb::patch, "/v1/sandboxes/{id}", Access::Tokens({S::kControl}),
      &LifecycleRoutes::PatchSandbox);
  add(verb::delete_, "/v1/sandboxes/{id}", Access::KeysOnly(), &LifecycleRoutes::DeleteSandbox);
  add(verb::post, "/v1/sandboxes/{id}/pause", Access::Tokens({S::kControl}),
      &LifecycleRoutes::PauseSandbox);
  add(verb::post, "/v1/sandboxes/{id}/resume", Access::Tokens({S::kControl}),
      &LifecycleRoutes::ResumeSandbox);
}

void LifecycleRoutes::OnVmTransition(const vmhost::Sandbox& sb, SandboxState) {
  if (sb.state() == SandboxState::kFailed || sb.state() == SandboxState::kStopped)
    egress_.Detach(sb.id());
  // Transitions the API asks for are made where it asks; here only the ones nobody asked for.
  if (sb.state() != SandboxState::kFailed) return;
  SandboxRecord* r = ctx_.sandboxes.Find(sb.id());
  if (!r || !IsAlive(r->state)) return;
  r->failure = sb.failure().empty() ? "the sandbox's VM failed" : sb.failure();
  ctx_.sandboxes.Transition(*r, SandboxState::kFailed,
                            {.reason = "qemu_exit", .detail = r->failure});
}

asio::awaitable<void> LifecycleRoutes::Recover() {
  std::vector<vmhost::AdoptRequest> wanted;
  std::vector<SandboxRecord*> lost;
  for (const auto& [id, rec] : ctx_.sandboxes.records()) {
    SandboxRecord* r = ctx_.sandboxes.Find(id);
    if (r->state == SandboxState::kCreating) {
      lost.push_back(r);
    } else if (r->state == SandboxState::kRunning || r->state == SandboxState::kPaused) {
      wanted.push_back(
          {r->id, r->slot, r->qemu_pid,
           std::chrono::system_clock::time_point(std::chrono::milliseconds(r->created_at_ms)),
           r->browser_refreshing});
    }
  }
  for (SandboxRecord* r : lost) {
    r->failure = "deskboxd stopped while the sandbox was being created";
    ctx_.sandboxes.Transition(*r, SandboxState::kFailed,
                              {.reason = "restart_recovery", .detail = r->failure});
  }
  auto results = co_await ctx_.manager.Recover(std::move(wanted));
  for (const auto& res : results) {
    SandboxRecord* r = ctx_.sandboxes.Find(res.id);
    if (!r) continue;
    if (res.adopted) {
      if (auto a = co_await egress_.Attach(r->id, r->slot, r->egress_json); !a)
        log::Error(kLifecycleLog, "sandbox {}: egress not re-attached: {} (its guest reaches nothing)",
                   r->id, a.error());
      egress_.DetachIfGone(r->id);
      ctx_.sandboxes.Transition(
          *r, res.state,
          {.reason = "restart_recovery", .detail = "adopted by a new deskboxd process"});
    } else {
      r->failure = "lost while deskboxd was down: " + res.failure;
      ctx_.sandboxes.Transition(*r, SandboxState::kFailed,
                                {.reason = "restart_recovery", .detail = r->failure});
    }
  }
}

asio::awaitable<void> LifecycleRoutes::DestroyAll() {
  std::vector<std::string> ids;
  for (const auto& [id, r] : ctx_.sandboxes.records())
    if (IsAlive(r.state)) ids.push_back(id);
  for (const auto& id : ids) {
    auto d = co_await ctx_.manager.Destroy(id);
    if (SandboxRecord* r = ctx_.sandboxes.Find(id))
      ctx_.sandboxes.Transition(*r, SandboxState::kStopped,
                                {.reason = "shutdown", .detail = d ? "" : d.error().message});
  }
}

bool LifecycleRoutes::RateLimitAllows(double* retry_after_s) {
  auto now = ctx_.clock.Steady();
  double rate = ctx_.config.creates_per_second;
  double burst = std::max(1.0, rate);
  bucket_tokens_ = std::min(
      burst, bucket_tokens_ + std::chrono::duration<double>(now - bucket_time_).count() * rate);
  bucket_time_ = now;
  if (bucket_tokens_ >= 1) {
    bucket_tokens_ -= 1;
    return true;
  }
  *retry_after_s = (1 - bucket_tokens_) / rate;
  return false;
}

json LifecycleRoutes::SandboxJson(const SandboxRecord& r) const {
  json metadata = json::object();
  if (auto m = ParseJson(r.metadata_json); m && m->is_object()) metadata = *m;
  json egress = nullptr;
  if (!r.egress_json.empty())
    if (auto e = ParseJson(r.egress_json)) egress = *e;
  json browser_ready = nullptr;
  if (r.state == SandboxState::kRunning || r.state == SandboxState::kPaused) {
    auto sb = ctx_.manager.Find(r.id);
    browser_ready = sb && !sb->browser_refreshing();
  }
  return json{{"id", r.id},
              {"state", StateName(r.state)},
              {"template", r.template_name},
              {"resolution", {{"width", r.width}, {"height", r.height}}},
              {"display",
               r.display_w ? json{{"width", r.display_w}, {"height", r.display_h}} : json(nullptr)},
              {"timeout_s", r.timeout_s},
              {"on_timeout", r.on_timeout},
              {"expires_at", TimeOrNull(r.state == SandboxState::kRunning ? r.expires_at_ms : 0)},
              {"created_at", Rfc3339(r.created_at_ms)},
              {"updated_at", Rfc3339(r.updated_at_ms)},
              {"stopped_at", TimeOrNull(r.stopped_at_ms)},
              {"metadata", metadata},
              {"egress", egress},
              {"failure", r.failure.empty() ? json(nullptr) : json(r.failure)},
              {"create_path", r.create_path},
              {"create_ms", r.create_ms},
              {"browser_ready", browser_ready},
              {"recording", {{"enabled", r.recording}, {"url", "/v1/sandboxes/" + r.id + "/recording"}}},
              {"limits", LimitsJson(EffectiveLimits(r, SizeOf(ctx_.manager)))},
              {"events_url", "/v1/sandboxes/" + r.id + "/events"}};
}

Reply LifecycleRoutes::ListTemplates(Call&) {
  const auto& m = ctx_.manager.manifest();
  json t = {{"name", ctx_.config.template_name},
            {"default", true},
            {"screen", {{"width", m.screen_width()}, {"height", m.screen_height()}}},
            {"memory_mib", m.memory_mib()},
            {"vcpus", m.smp()},
            {"qemu_version", m.qemu_version()},
            {"accelerator", ctx_.manager.accelerator()},
            {"chromium_version", m.chromium_version()},
            {"created_at", Rfc3339(m.created_unix_s() * 1000)}};
  co_return Json(200, {{"templates", json::array({t})}});
}

Reply LifecycleRoutes::CreateSandbox(Call& c) {
  const DaemonConfig& config = ctx_.config;
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto tpl = in.String("template", 1, 128);
  const auto& manifest = ctx_.manager.manifest();
  uint32_t width = manifest.screen_width(), height = manifest.screen_height();
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
      resize = width != manifest.screen_width() || height != manifest.screen_height();
    }
  }
  auto timeout = in.Integer("timeout_s", 1, config.max_timeout_s);
  auto on_timeout = in.Enum("on_timeout", {"pause", "stop"});
  json metadata = ReadMetadata(in).value_or(json::object());
  auto display = ReadDisplayMember(in);
  egress::Policy policy{egress_.Default(), {}, {}};
  if (const json* e = in.Any("egress")) {
    auto p = egress::ParsePolicy(*e, policy.default_action);
    if (!p)
      in.Fail(p.error().message);
    else
      policy = std::move(*p);
  }
  std::string egress = Dump(egress::PolicyJson(policy));
  bool recording = config.recording;
  if (const json* rec = in.Object("recording")) {
    ObjectReader rr(*rec, "recording");
    if (auto on = rr.Bool("enabled")) recording = *on;
    if (auto e = rr.Finish()) in.Fail(*e);
  }
  const TemplateSize size = SizeOf(ctx_.manager);
  const Limits defaults = DefaultLimits(size);
  auto limits = ReadLimits(in, defaults, size);
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  if (tpl && *tpl != config.template_name)
    co_return Error(422, "unknown_template",
                    fmt::format("template '{}' is not served here (GET /v1/templates)", *tpl));
  if (width < 320 || width > 3840 || height < 240 || height > 2160 || width % 2 || height % 2)
    co_return Error(
        422, "unsupported_resolution",
        fmt::format("{}x{} is not supported: width 320..3840 and height 240..2160, both even",
                    width, height));
  double retry = 0;
  if (!RateLimitAllows(&retry)) {
    auto r = Error(429, "rate_limited",
                   fmt::format("more than {} creates per second; retry in {:.1f} s",
                               config.creates_per_second, retry));
    r.headers.emplace_back("Retry-After", std::to_string(static_cast<int>(std::ceil(retry))));
    co_return r;
  }
  size_t alive = ctx_.sandboxes.AliveCount() + creating_;
  if (alive >= config.max_sandboxes)
    co_return Error(429, "sandbox_limit",
                    fmt::format("{} sandboxes are alive, the limit is {}; delete one first", alive,
                                config.max_sandboxes));

  auto t0 = ctx_.clock.Steady();
  ++creating_;
  auto sb = co_await ctx_.manager.Create();
  --creating_;
  if (!sb) co_return FromVmError(sb.error());
  if (resize) {
    std::string refused = "the sandbox has no guest agent connection";
    bool resized = false;
    if (auto agent = ctx_.manager.Agent((*sb)->id())) {
      auto r = co_await agent->ResizeDisplay(width, height);
      resized = r.has_value();
      if (!r) refused = r.error().message;
    }
    if (!resized) {
      co_await ctx_.manager.Destroy((*sb)->id());
      co_return Error(422, "unsupported_resolution", refused);
    }
  }
  // The policy is in force before the client hears of the sandbox.
  if (auto a = co_await egress_.Attach((*sb)->id(), (*sb)->slot(), egress); !a) {
    egress_.Detach((*sb)->id());
    co_await ctx_.manager.Destroy((*sb)->id());
    co_return Error(500, "internal", fmt::format("egress for the new sandbox: {}", a.error()));
  }
  egress_.DetachIfGone((*sb)->id());
  // A new QEMU's cgroup and a restored guest have the defaults; other limits are in force
  // before the client hears of the sandbox.
  if (limits && (limits->cpu.weight != defaults.cpu.weight || limits->cpu.max_millis != defaults.cpu.max_millis)) {
    if (auto l = co_await ctx_.manager.SetCpuLimits((*sb)->id(), limits->cpu); !l) {
      egress_.Detach((*sb)->id());
      co_await ctx_.manager.Destroy((*sb)->id());
      co_return Error(500, "internal", fmt::format("limits for the new sandbox: {}", l.error().message));
    }
  }
  if (limits && !limits->SameGuest(defaults)) {
    const vmhost::GuestLimits wanted = GuestOf(*limits, defaults);
    if (std::string failed = co_await SetGuestLimits((*sb)->id(), wanted); !failed.empty()) {
      egress_.Detach((*sb)->id());
      co_await ctx_.manager.Destroy((*sb)->id());
      co_return Error(500, "internal", fmt::format("exec limits in the new sandbox's guest: {}", failed));
    }
  }
  double ms = std::chrono::duration<double, std::milli>(ctx_.clock.Steady() - t0).count();
  ctx_.metrics.ObserveCreate(ms / 1000, std::string(vmhost::ToString((*sb)->path())));
  SandboxRecord r;
  r.id = (*sb)->id();
  r.state = SandboxState::kRunning;
  r.template_name = config.template_name;
  r.slot = (*sb)->slot();
  r.qemu_pid = (*sb)->qemu_pid();
  r.width = width;
  r.height = height;
  r.timeout_s = static_cast<uint32_t>(timeout.value_or(config.default_timeout_s));
  r.on_timeout = on_timeout.value_or("pause");
  r.created_at_ms = ctx_.clock.NowMs();
  r.expires_at_ms = r.created_at_ms + int64_t{r.timeout_s} * 1000;
  r.metadata_json = Dump(metadata);
  if (display) {
    r.display_w = display->first;
    r.display_h = display->second;
  }
  r.egress_json = egress;
  r.create_path = std::string(vmhost::ToString((*sb)->path()));
  r.create_ms = std::round(ms * 10) / 10;
  r.owner = c.principal.id;
  r.browser_refreshing = (*sb)->browser_refreshing();
  r.recording = recording;
  if (limits) Record(r, *limits);
  if ((*sb)->state() != SandboxState::kRunning) {
    // It died between restore and now: keep the record, say so.
    r.state = SandboxState::kFailed;
    r.failure = (*sb)->failure();
    r.expires_at_ms = 0;
  }
  std::string detail =
      fmt::format("created from {} ({}, {:.0f} ms)", r.template_name, r.create_path, ms);
  auto added = ctx_.sandboxes.Add(std::move(r), ByCall(c, detail));
  if (!added) {
    // Not on record, so not handed out: a sandbox nobody knows of must not keep running.
    egress_.Detach((*sb)->id());
    co_await ctx_.manager.Destroy((*sb)->id());
    co_return FromStoreError(added.error());
  }
  SandboxRecord& rec = **added;
  log::Info(kLifecycleLog, "sandbox {} created ({}, {:.0f} ms)", rec.id, rec.create_path, ms);
  co_return Json(201, SandboxJson(rec));
}

Reply LifecycleRoutes::ListSandboxes(Call& c) {
  std::optional<SandboxState> state;
  for (const auto& [k, v] : c.ex.query()) {
    if (k == "state") {
      state = vmhost::ParseSandboxState(v);
      if (!state)
        co_return Error(
            400, "invalid_request",
            fmt::format("state must be creating, running, paused, failed or stopped (got '{}')",
                        v));
    } else {
      co_return Error(400, "invalid_request", fmt::format("unknown query parameter '{}'", k));
    }
  }
  std::vector<const SandboxRecord*> sorted;
  for (const auto& [id, r] : ctx_.sandboxes.records()) {
    if (state ? r.state != *state : r.state == SandboxState::kStopped) continue;
    sorted.push_back(&r);
  }
  std::sort(sorted.begin(), sorted.end(),
            [](auto* a, auto* b) { return a->created_at_ms < b->created_at_ms; });
  json list = json::array();
  for (auto* r : sorted) list.push_back(SandboxJson(*r));
  co_return Json(200, {{"sandboxes", list}});
}

Reply LifecycleRoutes::GetSandbox(Call& c) {
  auto r = ctx_.sandboxes.Get(c.id);
  if (!r) co_return r.error();
  co_return Json(200, SandboxJson(**r));
}

asio::awaitable<std::string> LifecycleRoutes::SetGuestLimits(const std::string& id, vmhost::GuestLimits limits) {
  auto agent = ctx_.manager.Agent(id);
  if (!agent) co_return "the sandbox's guest agent is not connected";
  // (Not written as a conditional expression around co_await: GCC 12 miscompiles that.)
  auto l = co_await agent->SetLimits(limits);
  co_return l ? std::string() : l.error().message;
}

Reply LifecycleRoutes::PatchSandbox(Call& c) {
  if (auto r = ctx_.sandboxes.Get(c.id); !r) co_return r.error();
  auto body = co_await ReadJson(c);
  if (!body) co_return body.error();
  ObjectReader in(*body);
  auto timeout = in.Integer("timeout_s", 1, ctx_.config.max_timeout_s);
  std::optional<json> metadata = ReadMetadata(in);
  bool display_given = body->is_object() && body->contains("display");  // null too: it clears
  auto display = ReadDisplayMember(in);                                 // null clears it
  const TemplateSize size = SizeOf(ctx_.manager);
  auto found = ctx_.sandboxes.Get(c.id);  // (its absence answers 404 below)
  const Limits was = EffectiveLimits(found ? **found : SandboxRecord{}, size);
  auto limits = ReadLimits(in, was, size);
  if (auto e = in.Finish()) co_return Error(400, "invalid_request", *e);
  auto r = ctx_.sandboxes.Get(c.id);
  if (!r) co_return r.error();
  if ((*r)->state == SandboxState::kStopped || (*r)->state == SandboxState::kFailed)
    co_return Error(409, "invalid_state",
                    fmt::format("sandbox {} is {}", (*r)->id, StateName((*r)->state)));
  if (limits && !limits->SameGuest(was) && (*r)->state != SandboxState::kRunning)
    co_return Error(409, "invalid_state",
                    fmt::format("sandbox {} is {}: exec limits are set in its guest, which must be running",
                                (*r)->id, StateName((*r)->state)));
  if (limits) {
    // In force first (the cgroup of its QEMU, paused or not; the guest's), then on record.
    if (auto l = co_await ctx_.manager.SetCpuLimits(c.id, limits->cpu); !l) co_return FromVmError(l.error());
    if (!limits->SameGuest(was)) {
      // As a CPU limit that cannot be written: 500, and nothing changes (the CPU limits just
      // written go back).
      const vmhost::GuestLimits wanted = GuestOf(*limits, was);
      if (std::string failed = co_await SetGuestLimits(c.id, wanted); !failed.empty()) {
        auto undone = co_await ctx_.manager.SetCpuLimits(c.id, was.cpu);
        if (!undone) log::Warn(kLifecycleLog, "sandbox {}: CPU limits not put back: {}", c.id, undone.error().message);
        co_return Error(500, "internal", fmt::format("exec limits in the guest: {}", failed));
      }
    }
    r = ctx_.sandboxes.Get(c.id);  // looked up again: the record may have changed meanwhile
    if (!r) co_return r.error();
  }
  SandboxRecord& rec = **r;
  const SandboxRecord before = rec;
  if (timeout) {
    rec.timeout_s = static_cast<uint32_t>(*timeout);
    if (rec.state == SandboxState::kRunning)
      rec.expires_at_ms = ctx_.clock.NowMs() + *timeout * 1000;
  }
  if (metadata) rec.metadata_json = Dump(*metadata);
  if (limits) Record(rec, *limits);
  if (display_given) {
    rec.display_w = display ? display->first : 0;
    rec.display_h = display ? display->second : 0;
  }
  if (auto saved = ctx_.sandboxes.Save(rec); !saved) {
    rec = before;
    co_return FromStoreError(saved.error());
  }
  co_return Json(200, SandboxJson(rec));
}

Reply LifecycleRoutes::DeleteSandbox(Call& c) {
  auto r = ctx_.sandboxes.Get(c.id);
  if (!r) co_return r.error();
  if ((*r)->state == SandboxState::kStopped) co_return NoContent();
  // Guest operations in flight end with 410 from here on; a pause or resume in flight finishes
  // first (the turn), then the sandbox is destroyed.
  ctx_.sandboxes.MarkDeleting(c.id);
  auto turn = co_await ctx_.sandboxes.TakeTurn(c.id);
  SandboxRecord* rec = ctx_.sandboxes.Find(c.id);
  if (!rec || rec->state == SandboxState::kStopped) co_return NoContent();
  std::string detail;
  if (rec->state != SandboxState::kFailed) {
    auto d = co_await ctx_.manager.Destroy(c.id);
    if (!d && d.error().code != vmhost::VmError::Code::kNotFound) detail = d.error().message;
  }
  rec = ctx_.sandboxes.Find(c.id);
  if (rec && rec->state != SandboxState::kStopped)
    ctx_.sandboxes.Transition(*rec, SandboxState::kStopped, ByCall(c, detail));
  co_return NoContent();
}

Reply LifecycleRoutes::PauseSandbox(Call& c) {
  auto turn = co_await ctx_.sandboxes.TakeTurnIn(c.id, SandboxState::kRunning, "paused");
  if (!turn) co_return turn.error();
  auto p = co_await ctx_.manager.Pause(c.id);
  if (!p) co_return FromVmError(p.error());
  SandboxRecord& rec = **ctx_.sandboxes.Get(c.id);  // records are never removed
  if (rec.state == SandboxState::kRunning)
    ctx_.sandboxes.Transition(rec, SandboxState::kPaused, ByCall(c));
  if (auto gone = ctx_.sandboxes.DeletedDuring(c.id, "paused")) co_return *gone;
  co_return Json(200, SandboxJson(rec));
}

Reply LifecycleRoutes::ResumeSandbox(Call& c) {
  auto turn = co_await ctx_.sandboxes.TakeTurnIn(c.id, SandboxState::kPaused, "resumed");
  if (!turn) co_return turn.error();
  auto p = co_await ctx_.manager.Resume(c.id);
  SandboxRecord& rec = **ctx_.sandboxes.Get(c.id);
  auto sb = ctx_.manager.Find(c.id);
  if (sb && sb->state() == SandboxState::kRunning && rec.state == SandboxState::kPaused)
    ctx_.sandboxes.Transition(rec, SandboxState::kRunning,
                              ByCall(c, p ? "resumed" : "resumed; " + p.error().message));
  if (!p) co_return FromVmError(p.error());
  if (auto gone = ctx_.sandboxes.DeletedDuring(c.id, "resumed")) co_return *gone;
  co_return Json(200, SandboxJson(rec));
}

}  // namespace deskbox::api
