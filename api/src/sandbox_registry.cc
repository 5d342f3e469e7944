#include "api/sandbox_registry.h"

#include <fmt/format.h>

#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "api/router.h"
#include "common/log.h"

namespace deskbox::api {

namespace asio = boost::asio;
using vmhost::SandboxState;

namespace {
constexpr char kRegistryLog[] = "api";
}

bool IsAlive(SandboxState s) {
  return s == SandboxState::kCreating || s == SandboxState::kRunning || s == SandboxState::kPaused;
}

SandboxRegistry::SandboxRegistry(asio::any_io_executor executor, Store& store,
                                 recorder::EventSink& events, const Clock& clock)
    : executor_(std::move(executor)), store_(store), events_(events), clock_(clock) {}

std::expected<void, std::string> SandboxRegistry::Load() {
  auto recs = store_.LoadSandboxes();
  if (!recs) return std::unexpected(recs.error().message);
  for (auto& r : *recs) records_[r.id] = std::move(r);
  return {};
}

SandboxRecord* SandboxRegistry::Find(const std::string& id) {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

const SandboxRecord* SandboxRegistry::Find(const std::string& id) const {
  auto it = records_.find(id);
  return it == records_.end() ? nullptr : &it->second;
}

std::expected<SandboxRecord*, HttpResponse> SandboxRegistry::Get(const std::string& id) {
  if (auto* r = Find(id)) return r;
  return std::unexpected(Error(404, "not_found", fmt::format("no sandbox '{}'", id)));
}

size_t SandboxRegistry::AliveCount() const {
  size_t n = 0;
  for (const auto& [id, r] : records_) n += IsAlive(r.state);
  return n;
}

std::expected<void, StoreError> SandboxRegistry::Save(SandboxRecord& r) {
  int64_t before = r.updated_at_ms;
  r.updated_at_ms = clock_.NowMs();
  if (auto s = store_.PutSandbox(r); !s) {
    r.updated_at_ms = before;
    log::Error(kRegistryLog, "sandbox {}: {}", r.id, s.error().message);
    return s;
  }
  unsaved_.erase(r.id);
  return {};
}

void SandboxRegistry::SaveOrRetry(SandboxRecord& r) {
  if (!Save(r)) unsaved_.insert(r.id);
}

size_t SandboxRegistry::SaveUnsaved() {
  for (auto it = unsaved_.begin(); it != unsaved_.end();) {
    auto rec = records_.find(*it);
    if (rec == records_.end()) {
      it = unsaved_.erase(it);
      continue;
    }
    if (auto s = store_.PutSandbox(rec->second); !s) {
      if (s.error().code == StoreError::Code::kFull) break;  // the rest would fail alike
      ++it;
      continue;
    }
    log::Info(kRegistryLog, "sandbox {}: written again after a failed write", rec->first);
    it = unsaved_.erase(it);
  }
  return unsaved_.size();
}

std::expected<SandboxRecord*, StoreError> SandboxRegistry::Add(SandboxRecord r, TransitionCause cause) {
  std::string id = r.id;
  SandboxState to = r.state;
  r.updated_at_ms = clock_.NowMs();
  if (auto s = store_.PutSandbox(r); !s) {
    log::Error(kRegistryLog, "sandbox {}: {}", id, s.error().message);
    return std::unexpected(s.error());
  }
  SandboxRecord& rec = records_[id] = std::move(r);
  auto e = cause.base ? std::move(*cause.base) : SystemEvent(id);
  e.set_sandbox_id(id);
  auto* l = e.mutable_lifecycle();
  l->set_from_state("");
  l->set_to_state(std::string(vmhost::ToString(to)));
  l->set_reason(std::move(cause.reason));
  l->set_detail(std::move(cause.detail));
  events_.Emit(std::move(e));
  for (auto* listener : listeners_) listener->OnSandboxState(rec, to);
  return &rec;
}

bool SandboxRegistry::Transition(SandboxRecord& r, SandboxState to, TransitionCause cause) {
  SandboxState from = r.state;
  if (to != from && !vmhost::CanTransition(from, to)) {
    log::Error(kRegistryLog, "sandbox {}: refused transition {} → {} ({})", r.id, vmhost::ToString(from),
               vmhost::ToString(to), cause.reason);
    return false;
  }
  int64_t now = clock_.NowMs();
  r.state = to;
  if (to == SandboxState::kRunning) {
    if (from != SandboxState::kRunning || r.expires_at_ms == 0)
      r.expires_at_ms = now + int64_t{r.timeout_s} * 1000;
  } else {
    r.expires_at_ms = 0;
  }
  if (to == SandboxState::kStopped && from != SandboxState::kStopped) r.stopped_at_ms = now;
  if (to == SandboxState::kFailed && r.failure.empty()) r.failure = cause.detail;
  SaveOrRetry(r);
  auto e = cause.base ? std::move(*cause.base) : SystemEvent(r.id);
  e.set_sandbox_id(r.id);
  auto* l = e.mutable_lifecycle();
  l->set_from_state(std::string(vmhost::ToString(from)));
  l->set_to_state(std::string(vmhost::ToString(to)));
  l->set_reason(std::move(cause.reason));
  l->set_detail(std::move(cause.detail));
  events_.Emit(std::move(e));
  if (!IsAlive(to)) deleting_.erase(r.id);
  for (auto* listener : listeners_) listener->OnSandboxState(r, from);
  return true;
}

bool SandboxRegistry::Deleting(const std::string& id) const {
  auto it = deleting_.find(id);
  return it != deleting_.end() && it->second;
}

void SandboxRegistry::MarkDeleting(const std::string& id) {
  deleting_[id] = true;
}

SandboxRegistry::LifecycleTurn::~LifecycleTurn() {
  if (registry_) registry_->EndTurn(id_);
}

asio::awaitable<SandboxRegistry::LifecycleTurn> SandboxRegistry::TakeTurn(const std::string& id) {
  Turnstile& t = turns_[id];
  if (!t.held) {
    t.held = true;
    co_return LifecycleTurn(this, id);
  }
  // Handed over by EndTurn, which cancels our timer and leaves the turnstile held.
  auto timer =
      std::make_shared<asio::steady_timer>(executor_, asio::steady_timer::time_point::max());
  t.waiting.push_back(timer);
  boost::system::error_code ec;
  co_await timer->async_wait(asio::redirect_error(asio::use_awaitable, ec));
  co_return LifecycleTurn(this, id);
}

std::optional<SandboxRegistry::LifecycleTurn> SandboxRegistry::TryTurn(const std::string& id) {
  Turnstile& t = turns_[id];
  if (t.held) return std::nullopt;
  t.held = true;
  return LifecycleTurn(this, id);
}

asio::awaitable<std::expected<SandboxRegistry::LifecycleTurn, HttpResponse>>
SandboxRegistry::TakeTurnIn(const std::string& id, SandboxState required, std::string_view what) {
  using R = std::expected<LifecycleTurn, HttpResponse>;
  if (!Find(id))
    co_return R(std::unexpected(Error(404, "not_found", fmt::format("no sandbox '{}'", id))));
  auto turn = co_await TakeTurn(id);
  const SandboxRecord* r = Find(id);
  if (!r) co_return R(std::unexpected(Error(404, "not_found", fmt::format("no sandbox '{}'", id))));
  if (Deleting(id))
    co_return R(std::unexpected(
        Error(410, "sandbox_gone", fmt::format("sandbox {} is being deleted", id))));
  if (r->state != required)
    co_return R(std::unexpected(
        Error(409, "invalid_state",
              fmt::format("sandbox {} is {}; only a {} sandbox can be {}", id,
                          vmhost::ToString(r->state), vmhost::ToString(required), what))));
  co_return R(std::move(turn));
}

std::optional<HttpResponse> SandboxRegistry::DeletedDuring(const std::string& id,
                                                           std::string_view what) const {
  if (!Deleting(id)) return std::nullopt;
  return Error(410, "sandbox_gone",
               fmt::format("sandbox {} was deleted while it was being {}", id, what));
}

void SandboxRegistry::EndTurn(const std::string& id) {
  auto it = turns_.find(id);
  if (it == turns_.end()) return;
  Turnstile& t = it->second;
  if (t.waiting.empty()) {
    turns_.erase(it);
    return;
  }
  auto next = std::move(t.waiting.front());
  t.waiting.pop_front();
  next->cancel();
}

std::expected<SandboxRegistry::GuestOperation, HttpResponse> SandboxRegistry::BeginGuestOperation(
    const std::string& id, std::string what) const {
  const SandboxRecord* r = Find(id);
  if (!r) return std::unexpected(Error(404, "not_found", fmt::format("no sandbox '{}'", id)));
  if (Deleting(id))
    return std::unexpected(
        Error(410, "sandbox_gone", fmt::format("sandbox {} is being deleted", id)));
  if (r->state != SandboxState::kRunning)
    return std::unexpected(
        Error(409, "invalid_state",
              fmt::format("sandbox {} is {}; it must be running", id, vmhost::ToString(r->state))));
  return GuestOperation(this, id, std::move(what));
}

std::optional<HttpResponse> SandboxRegistry::GuestOperation::Interrupted() const {
  const SandboxRecord* r = registry_->Find(id_);
  if (!r || registry_->Deleting(id_) || r->state == SandboxState::kStopped)
    return Error(410, "sandbox_gone",
                 fmt::format("sandbox {} was deleted during the {}", id_, what_));
  if (r->state != SandboxState::kRunning)
    return Error(
        409, "invalid_state",
        fmt::format("sandbox {} became {} during the {}", id_, vmhost::ToString(r->state), what_));
  return std::nullopt;
}

}  // namespace deskbox::api
