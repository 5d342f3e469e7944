#pragma once
// SandboxRegistry: the records clients see (persisted in Store), the one place a sandbox's state
// changes, and the per-sandbox ordering of operations.
//
// - Every state change goes through Transition(): it checks vmhost's CanTransition, updates the
//   record's countdown and timestamps, saves it, writes the lifecycle event, then tells every
//   SandboxStateListener (live connections, screen mirrors, egress, ...) — no route calls them.
// - Lifecycle operations on one sandbox (pause, resume, delete, timeouts) take turns, in order
//   of arrival: LifecycleTurn. A delete marks the sandbox as being deleted at once, so guest
//   operations in flight (exec, files, screenshots, actions) end with 410 when they next look
//   (GuestOperation::Interrupted), and new ones are refused.
//
// - A record is written to the Store before anyone hears of it. A new record (Add) or a change
//   a client asks for (Save) that cannot be written is not made: the caller gets the error and
//   answers it (507 on a full state disk). A state change is a fact about a VM that already
//   happened: one that cannot be written stays in memory, is announced, and is written again
//   by SaveUnsaved() until it is (the timeout clock calls it every tick).
//
// Threads: the io_context's.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <expected>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "api/clock.h"
#include "api/http_server.h"
#include "api/store.h"
#include "recorder/event_sink.h"
#include "vmhost/sandbox.h"

namespace deskbox::api {

// Told of every state change after it is saved and on the timeline.
class SandboxStateListener {
 public:
  virtual ~SandboxStateListener() = default;
  virtual void OnSandboxState(const SandboxRecord& r, vmhost::SandboxState from) = 0;
};

// Why a state changed, for the lifecycle event.
struct TransitionCause {
  std::string reason;  // api, timeout, qemu_exit, restart_recovery, shutdown
  std::string detail;
  std::optional<recorder::v1::Event> base;  // the event to fill (actor, request id); SYSTEM if none
};

bool IsAlive(vmhost::SandboxState s);  // creating, running or paused

class SandboxRegistry {
 public:
  SandboxRegistry(boost::asio::any_io_executor executor, Store& store, recorder::EventSink& events,
                  const Clock& clock);

  std::expected<void, std::string> Load();
  void Subscribe(SandboxStateListener* listener) { listeners_.push_back(listener); }

  SandboxRecord* Find(const std::string& id);
  const SandboxRecord* Find(const std::string& id) const;
  // The record, or the 404 to answer.
  std::expected<SandboxRecord*, HttpResponse> Get(const std::string& id);
  const std::map<std::string, SandboxRecord>& records() const { return records_; }
  size_t AliveCount() const;

  // A new sandbox's record, announced as a change from no state to its own. If it cannot be
  // written, nothing is added or announced.
  std::expected<SandboxRecord*, StoreError> Add(SandboxRecord r, TransitionCause cause);
  // The one way a state changes. A change vmhost's table does not allow is refused (false, and
  // logged). `to` equal to the current state re-announces it (a restart adopting a sandbox).
  bool Transition(SandboxRecord& r, vmhost::SandboxState to, TransitionCause cause);
  // Saves a changed record (not its state: Transition does that). On an error the caller puts
  // the record back as it was.
  [[nodiscard]] std::expected<void, StoreError> Save(SandboxRecord& r);
  // Saves a change that has happened whatever the store says (a browser refresh ended); if the
  // write fails, SaveUnsaved() tries again.
  void SaveOrRetry(SandboxRecord& r);
  // Writes the records whose last write failed; how many are still unwritten.
  size_t SaveUnsaved();
  size_t unsaved() const { return unsaved_.size(); }

  // Whether a delete of the sandbox has begun (it ends as stopped).
  bool Deleting(const std::string& id) const;
  void MarkDeleting(const std::string& id);

  // A lifecycle turn: held while one pause, resume, delete or timeout action runs.
  class LifecycleTurn {
   public:
    LifecycleTurn(LifecycleTurn&& o) noexcept : registry_(o.registry_), id_(std::move(o.id_)) {
      o.registry_ = nullptr;
    }
    LifecycleTurn& operator=(LifecycleTurn&&) = delete;
    ~LifecycleTurn();

   private:
    friend class SandboxRegistry;
    LifecycleTurn(SandboxRegistry* registry, std::string id)
        : registry_(registry), id_(std::move(id)) {}
    SandboxRegistry* registry_;
    std::string id_;
  };
  // Waits for the sandbox's turn (first come, first served).
  boost::asio::awaitable<LifecycleTurn> TakeTurn(const std::string& id);
  // The turn if nobody holds it, else nullopt (the timeout clock skips busy sandboxes).
  std::optional<LifecycleTurn> TryTurn(const std::string& id);
  // Waits for the sandbox's turn, then checks that the sandbox is `required` and not being
  // deleted: the turn, or the answer (404, 409, 410). `what` names the operation ("paused").
  boost::asio::awaitable<std::expected<LifecycleTurn, HttpResponse>> TakeTurnIn(
      const std::string& id, vmhost::SandboxState required, std::string_view what);
  // 410 when a delete began while `what` ran; nullopt otherwise.
  std::optional<HttpResponse> DeletedDuring(const std::string& id, std::string_view what) const;

  // A guest operation (exec, file transfer, screenshot, actions...) on a running sandbox.
  class GuestOperation {
   public:
    // After an await: the answer to give instead when the sandbox was deleted (410) or left
    // the running state (409) meanwhile; nullopt while it still runs.
    std::optional<HttpResponse> Interrupted() const;

   private:
    friend class SandboxRegistry;
    GuestOperation(const SandboxRegistry* registry, std::string id, std::string what)
        : registry_(registry), id_(std::move(id)), what_(std::move(what)) {}
    const SandboxRegistry* registry_;
    std::string id_, what_;
  };
  // Begins one, or the answer when the sandbox is unknown (404), not running (409) or being
  // deleted (410). `what` names it in those answers ("exec", "file upload").
  std::expected<GuestOperation, HttpResponse> BeginGuestOperation(const std::string& id,
                                                                  std::string what) const;

 private:
  struct Turnstile {
    bool held = false;
    std::deque<std::shared_ptr<boost::asio::steady_timer>> waiting;
  };
  void EndTurn(const std::string& id);

  boost::asio::any_io_executor executor_;
  Store& store_;
  recorder::EventSink& events_;
  const Clock& clock_;
  std::map<std::string, SandboxRecord> records_;
  std::map<std::string, Turnstile> turns_;
  std::map<std::string, bool> deleting_;
  std::set<std::string> unsaved_;  // records changed in memory whose write failed
  std::vector<SandboxStateListener*> listeners_;
};

}  // namespace deskbox::api
