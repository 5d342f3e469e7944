#pragma once
// SandboxHost: what deskboxd asks of vmhost — create, pause, resume, destroy and find sandboxes,
// reach a guest's ports, hand over egress sockets — as an interface, so that the API's route
// tests run against a fake (tests/api_unit) and only SandboxManager knows about QEMU, the jailer
// and the pools. The types every caller shares live here too.
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "template.pb.h"
#include "vmhost/agent_client.h"
#include "vmhost/cgroups.h"
#include "vmhost/guest_agent.h"
#include "vmhost/idle_trim.h"
#include "vmhost/qmp.h"
#include "vmhost/sandbox.h"

namespace deskbox::vmhost {

struct VmError {
  enum class Code { kNotFound, kInvalidState, kCapacity, kJailer, kQemu, kAgent, kTimeout, kGuest };
  Code code;
  std::string message;
};

// What a translation-cache trim request found: whether the sandbox's QEMU can trim (it runs
// the plugin), and KiB of its cache in memory when asked. The trim itself follows within
// moments, when a vCPU next idles.
struct TrimStats {
  bool trimmable = false;
  uint64_t resident_before_kib = 0;
};

enum class CreatePath { kWarm, kPrestarted, kCold };
std::string_view ToString(CreatePath p);

// One sandbox's VM as vmhost holds it. Callers read it; only the SandboxHost that made it
// changes it (SandboxManager, or a test's fake deriving from it).
class Sandbox {
 public:
  const std::string& id() const { return id_; }
  uint32_t slot() const { return slot_; }
  int qemu_pid() const { return qemu_pid_; }
  SandboxState state() const { return state_; }
  const std::string& failure() const { return failure_; }  // why it failed, if it did
  CreatePath path() const { return path_; }
  std::chrono::system_clock::time_point created_at() const { return created_at_; }
  // After a restore for a waiting client the sandbox is handed out before its browser has
  // reloaded its pages in new renderers (SandboxManager::RefreshBrowser); until then nothing may
  // talk to a page: SandboxManager::WaitBrowserFresh() is the gate.
  bool browser_refreshing() const { return browser_refreshing_; }
  // Why the refresh failed, if it did (the sandbox is then failed).
  const std::string& browser_failure() const { return browser_failure_; }
  // The VM's channels, nullptr before they are connected: QMP and the guest agent.
  QmpClient* qmp() const { return qmp_.get(); }
  AgentClient* agent() const { return agent_.get(); }
  // Idle trimming of the translation cache (VmHostConfig::trim_idle_after).
  const IdleTrim& idle_trim() const { return idle_trim_; }

 protected:
  friend class SandboxManager;
  std::string id_;
  uint32_t slot_ = 0;
  int qemu_pid_ = 0;
  SandboxState state_ = SandboxState::kCreating;
  std::string failure_;
  CreatePath path_ = CreatePath::kCold;
  std::chrono::system_clock::time_point created_at_;
  std::unique_ptr<QmpClient> qmp_;
  std::unique_ptr<AgentClient> agent_;
  std::unique_ptr<boost::asio::posix::stream_descriptor> pidfd_;
  bool browser_refreshing_ = false;
  std::string browser_failure_;
  std::vector<std::shared_ptr<boost::asio::steady_timer>> browser_waiters_;  // cancelled when it ends
  bool refresh_on_resume_ = false;  // adopted paused with its refresh unfinished
  IdleTrim idle_trim_;
};

// A sandbox the previous deskboxd process left running, to take over after a restart.
struct AdoptRequest {
  std::string id;
  uint32_t slot = 0;
  int qemu_pid = 0;
  std::chrono::system_clock::time_point created_at;
  // Handed out before its pages reloaded and not known to have finished: the previous process
  // may have died mid-refresh, leaving crashed pages. Recover runs the refresh again.
  bool browser_refreshing = false;
};
struct AdoptResult {
  std::string id;
  bool adopted = false;
  SandboxState state = SandboxState::kFailed;  // running or paused (as QEMU reports) when adopted
  std::string failure;                         // why not, when !adopted
};

// Told of every state change the manager makes (after it is made), including the ones nobody
// asked for: QEMU exiting turns a sandbox failed.
using TransitionObserver = std::function<void(const Sandbox&, SandboxState from)>;
// Told when a browser refresh after a hand-out has ended (browser_failure says how).
using BrowserObserver = std::function<void(const Sandbox&)>;
// Whether a client holds a live connection to the sandbox (a live view, a CDP session): such a
// sandbox is not trimmed however idle it is, so that its first input does not pay for it.
using InUse = std::function<bool(const std::string& id)>;

struct PoolStats {
  size_t netns_ready = 0, prestarted = 0, warm = 0, sandboxes = 0, free_slots = 0;
  size_t refreshes_running = 0, refreshes_waiting = 0;  // browser refreshes after hand-outs
  size_t trimmed = 0;         // running sandboxes whose translation cache is trimmed
  uint64_t trims_total = 0;   // translation-cache trims since start
};

class SandboxHost {
 public:
  virtual ~SandboxHost() = default;

  // Told of every state change vmhost makes, of the end of every browser refresh, and asked
  // whether a client holds a live connection (see the types above).
  virtual void SetObserver(TransitionObserver observer) = 0;
  virtual void SetBrowserObserver(BrowserObserver observer) = 0;
  virtual void SetInUse(InUse in_use) = 0;

  // Takes over the sandboxes of a previous process; the result says which were adopted.
  virtual boost::asio::awaitable<std::vector<AdoptResult>> Recover(std::vector<AdoptRequest> sandboxes) = 0;
  // A running sandbox (SandboxManager::Create says from where).
  virtual boost::asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> Create() = 0;
  // Waits until no page of the sandbox's browser holds random state shared with other clones.
  virtual boost::asio::awaitable<std::expected<void, VmError>> WaitBrowserFresh(std::shared_ptr<Sandbox> sb,
                                                                                std::chrono::milliseconds timeout) = 0;
  virtual boost::asio::awaitable<std::expected<void, VmError>> Destroy(const std::string& id) = 0;
  virtual boost::asio::awaitable<std::expected<void, VmError>> Pause(const std::string& id) = 0;
  virtual boost::asio::awaitable<std::expected<void, VmError>> Resume(const std::string& id) = 0;
  // Sets a sandbox's CPU share and cap (its QEMU's cgroup, through the jailer); running or paused.
  virtual boost::asio::awaitable<std::expected<void, VmError>> SetCpuLimits(const std::string& id,
                                                                            CpuLimits limits) = 0;
  virtual std::shared_ptr<Sandbox> Find(const std::string& id) const = 0;
  // The sandbox's guest agent (guest_agent.h), or nullptr when it has no live agent channel.
  virtual std::shared_ptr<GuestAgent> Agent(const std::string& id) const = 0;
  virtual PoolStats Stats() const = 0;

  // A TCP connection to the guest, from a socket made inside the sandbox's netns.
  virtual boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, VmError>> ConnectGuest(
      uint32_t slot, uint16_t port, std::chrono::milliseconds timeout) = 0;
  // The egress sockets of a slot, by role: tcp4, tcp6, udp4, udp6, nflog.
  virtual boost::asio::awaitable<std::expected<std::map<std::string, UniqueFd>, VmError>> OpenEgressSockets(
      uint32_t slot) = 0;
  // Unconnected sockets in the uplink netns.
  virtual boost::asio::awaitable<std::expected<std::vector<UniqueFd>, VmError>> OpenUplinkSockets(
      bool ipv6, bool udp, unsigned count) = 0;

  // Destroys pooled VMs, and every sandbox unless `keep_sandboxes`.
  virtual boost::asio::awaitable<void> Shutdown(bool keep_sandboxes) = 0;

  virtual const v1::TemplateManifest& manifest() const = 0;
  virtual const std::string& accelerator() const = 0;
};

}  // namespace deskbox::vmhost
