#pragma once
// SandboxManager: creates sandboxes by restoring the template, keeps the pools, and enforces the
// state machine (vmhost/sandbox.h) in one place. Everything runs on one io_context thread; QEMU,
// network namespaces and cgroups are reached only through the Jailer (privileged helper).
//
// Pools (sizes are configuration, 0 disables):
//  - network slots: netns + tap + nftables made ahead;
//  - pre-started: QEMU waiting in -incoming defer on a network slot (QMP handshake done);
//  - warm: restored, resumed and checked (RFB + CDP answered) sandboxes; hand-out only sets the
//    clock and reseeds the RNG.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <expected>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "template.pb.h"
#include "vmhost/agent_client.h"
#include "vmhost/jailer_client.h"
#include "vmhost/qemu_command.h"
#include "vmhost/qmp.h"
#include "vmhost/sandbox.h"
#include "vmhost/sandbox_host.h"
#include "vmhost/restorer.h"
#include "vmhost/slot_pool.h"
#include "vmhost/vm_pools.h"

namespace deskbox::vmhost {

struct VmHostConfig {
  std::string cache_dir = "/var/cache/deskbox";
  std::string template_name;     // directory name under <cache>/templates
  std::string accelerator = "auto";
  uint32_t tb_size_mib = kDefaultTbSizeMib;  // TCG translation cache per QEMU
  uint32_t first_slot = 0;
  uint32_t max_slots = 64;       // sandboxes + pooled VMs at once
  uint32_t netns_pool = 2;
  uint32_t prestart_pool = 1;
  uint32_t warm_pool = 1;
  std::chrono::milliseconds restore_timeout{30000};
  std::chrono::milliseconds ready_timeout{60000};
  // Browser refreshes after hand-outs that run at once; the rest wait their turn. 0: one per
  // guest's worth of host CPUs (host CPUs / the template's vCPUs, at least 1). Under emulation a
  // refresh is seconds of CPU; run all at once, 16 of them outlasted their deadlines.
  uint32_t max_concurrent_refreshes = 0;
  // Under TCG an idle handed-out sandbox hands its translation cache (most of its QEMU's memory)
  // back to the host: once its QEMU has used less than trim_idle_cpu of a core for
  // trim_idle_after, and again after every busy spell (jailer.proto TrimTranslationCache). 0 s:
  // never.
  std::chrono::seconds trim_idle_after{60};
  double trim_idle_cpu = 0.15;
  // A trimmed sandbox that stays idle still translates new code (Chromium's timers, the
  // kernel's page reuse): its cache grew from 40 MiB 15 s after a trim to 85 MiB after 5
  // minutes, and would grow until it filled the whole tb-size. So it is looked at again every
  // trim_idle_after and trimmed again once the cache holds more than this. 0: never while idle.
  // 48, not 64: idle desktops settle at 52–56 MiB and were never trimmed again under 64; with 48,
  // 16 idle sandboxes averaged 145 MiB PSS over 10 minutes instead of 166 (docs/benchmarks.md).
  uint32_t trim_regrown_mib = 48;
};


class SandboxManager final : public SandboxHost {
 public:
  SandboxManager(boost::asio::any_io_executor executor, Jailer& jailer, VmHostConfig config);
  ~SandboxManager();

  // Reads the template manifest and starts filling the pools.
  std::expected<void, VmError> Start();
  // Start() in two steps, for a daemon that re-adopts sandboxes first: Load() reads the manifest;
  // Recover() takes over the sandboxes of a previous process, destroys every other slot the
  // jailer still has (pools of that process, dead QEMUs), then starts filling the pools.
  std::expected<void, VmError> Load();
  boost::asio::awaitable<std::vector<AdoptResult>> Recover(std::vector<AdoptRequest> sandboxes) override;
  void SetObserver(TransitionObserver observer) override { observer_ = std::move(observer); }
  void SetBrowserObserver(BrowserObserver observer) override { browser_observer_ = std::move(observer); }
  void SetInUse(InUse in_use) override { in_use_ = std::move(in_use); }
  // Waits until every pool is at its target (for tests and benchmarks), or the timeout passes.
  boost::asio::awaitable<bool> WaitPoolsFull(std::chrono::milliseconds timeout);

  // A running sandbox. From the warm pool its browser is fresh already; a restore made for this
  // call returns once the guest is restored, its clock set and its RNG reseeded, and reloads
  // the browser's pages in the background (WaitBrowserFresh).
  boost::asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> Create() override;
  // Waits until no page of the sandbox's browser holds random state shared with other clones:
  // every page reloaded in a renderer started after the restore and running script. At once
  // when that is so already. An error if the refresh failed (the sandbox is failed then), the
  // sandbox stopped, or `timeout` passed.
  boost::asio::awaitable<std::expected<void, VmError>> WaitBrowserFresh(std::shared_ptr<Sandbox> sb,
                                                                        std::chrono::milliseconds timeout) override;
  boost::asio::awaitable<std::expected<void, VmError>> Destroy(const std::string& id) override;
  boost::asio::awaitable<std::expected<void, VmError>> Pause(const std::string& id) override;
  boost::asio::awaitable<std::expected<void, VmError>> Resume(const std::string& id) override;
  boost::asio::awaitable<std::expected<void, VmError>> SetCpuLimits(const std::string& id, CpuLimits limits) override;
  // Asks the sandbox's QEMU to drop its translation cache from memory (done when a vCPU next
  // idles, within moments on a desktop at rest; the idle trimming does it by itself).
  // above_kib > 0: only if the cache holds more than that in memory (TrimStats::trimmable
  // false otherwise).
  boost::asio::awaitable<std::expected<TrimStats, VmError>> TrimTranslationCache(const std::string& id,
                                                                                 uint64_t above_kib = 0);
  // Changes the idle trimming while running (VmHostConfig::trim_idle_after, trim_regrown_mib);
  // 0 s stops it.
  void SetIdleTrim(std::chrono::seconds after, uint32_t regrown_mib);
  std::shared_ptr<Sandbox> Find(const std::string& id) const override;
  std::shared_ptr<GuestAgent> Agent(const std::string& id) const override;
  std::vector<std::shared_ptr<Sandbox>> List() const;
  PoolStats Stats() const override;

  // A TCP connection to the guest, from a socket made inside the sandbox's netns.
  boost::asio::awaitable<std::expected<boost::asio::ip::tcp::socket, VmError>> ConnectGuest(
      uint32_t slot, uint16_t port, std::chrono::milliseconds timeout) override;
  // The egress sockets of a slot (jailer.proto OpenEgressSockets), by role: tcp4, tcp6, udp4,
  // udp6, nflog.
  boost::asio::awaitable<std::expected<std::map<std::string, UniqueFd>, VmError>> OpenEgressSockets(
      uint32_t slot) override;
  // Unconnected sockets in the uplink netns (jailer.proto OpenUplinkSockets).
  boost::asio::awaitable<std::expected<std::vector<UniqueFd>, VmError>> OpenUplinkSockets(bool ipv6, bool udp,
                                                                                          unsigned count) override;
  // Waits until the guest's RFB server sends its banner and Chromium's /json/version answers.
  // `stop`, when given, is asked between tries: true ends the wait at once (a sandbox destroyed
  // meanwhile has no network left to try).
  boost::asio::awaitable<std::expected<void, VmError>> WaitGuestServices(
      uint32_t slot, std::chrono::milliseconds timeout, std::function<bool()> stop = {});

  // Destroys every pooled VM, and every sandbox unless `keep_sandboxes` (their QEMUs keep
  // running for the next process to Recover); the manager refills nothing afterwards.
  boost::asio::awaitable<void> Shutdown(bool keep_sandboxes = false) override;

  // Logs the guest's browser log tail and load, for a failure to explain itself.
  boost::asio::awaitable<void> LogGuestState(Sandbox& sb, std::string_view why);

  const v1::TemplateManifest& manifest() const override { return manifest_; }
  const std::string& accelerator() const override { return accelerator_; }

 private:
  boost::asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> CreateOnce(bool* warm);
  // Pool VMs run at nice 10, handed-out ones at 0 (jailer SetSlotPriority).
  boost::asio::awaitable<void> SetPriority(Sandbox& sb, bool background);
  boost::asio::awaitable<std::expected<std::shared_ptr<Sandbox>, VmError>> Prestart(uint32_t slot);
  // restorer_'s steps on the sandbox's channels.
  boost::asio::awaitable<std::expected<void, VmError>> Restore(Sandbox& sb);
  boost::asio::awaitable<std::expected<void, VmError>> HandOut(Sandbox& sb);
  // One step of the refill loop (sandbox_pools.cc): whether it made something, or failed.
  struct RefillOutcome {
    bool progress = false;
    bool failed = false;
  };
  boost::asio::awaitable<RefillOutcome> RefillWarm(std::shared_ptr<bool> alive);
  boost::asio::awaitable<RefillOutcome> RefillPrestarted(std::shared_ptr<bool> alive);
  // Closes a pooled VM's channels and releases its slot (its QEMU goes with the slot).
  boost::asio::awaitable<void> DiscardPooled(Sandbox& sb);
  // Restarts the browser processes that hold snapshot-shared random state and reloads every
  // page in a new renderer, then waits until the guest answers RFB and CDP and every page runs
  // script (a client connecting earlier would race the reload).
  boost::asio::awaitable<std::expected<void, VmError>> RefreshBrowser(Sandbox& sb);
  // RefreshBrowser for a sandbox already handed out: marks it refreshing, wakes its waiters when
  // done, and fails the sandbox if the refresh fails.
  void RefreshInBackground(const std::shared_ptr<Sandbox>& sb);
  // A turn to run a browser refresh (at most refresh_limit_ at once, first come first served);
  // EndRefreshTurn hands it to the next in line.
  boost::asio::awaitable<void> RefreshTurn();
  void EndRefreshTurn();
  // One HTTP request to the guest browser's DevTools server, through the sandbox's netns: the
  // body of a 200 answer.
  boost::asio::awaitable<std::expected<std::string, VmError>> GuestHttp(uint32_t slot, const std::string& method,
                                                                        const std::string& path,
                                                                        std::chrono::milliseconds timeout);
  // The guest browser's page targets (id → url, from /json/list).
  boost::asio::awaitable<std::expected<std::map<std::string, std::string>, VmError>> GuestPageIds(
      uint32_t slot, std::chrono::milliseconds timeout);
  // One DevTools command to a guest page over its WebSocket (guest_page.cc): the command's
  // "result" object, or the error.
  boost::asio::awaitable<std::expected<nlohmann::json, VmError>> GuestPageCall(uint32_t slot, const std::string& page_id,
                                                                               const std::string& method,
                                                                               const nlohmann::json& params,
                                                                               std::chrono::milliseconds timeout);
  // Whether a guest page runs script: Runtime.evaluate("1") answers 1 within `timeout`. A page
  // that lists a URL may still have no live renderer.
  boost::asio::awaitable<std::expected<void, VmError>> GuestPageEvaluates(uint32_t slot, const std::string& page_id,
                                                                          std::chrono::milliseconds timeout);
  boost::asio::awaitable<void> ReleaseSlot(uint32_t slot);
  boost::asio::awaitable<std::expected<void, VmError>> Transition(Sandbox& sb, SandboxState to);
  boost::asio::awaitable<void> RefillLoop(std::shared_ptr<bool> alive);
  // Trims the translation cache of handed-out sandboxes that idle (not the warm pool's).
  boost::asio::awaitable<void> TrimLoop(std::shared_ptr<bool> alive);
  void StartTrimLoop();
  // above_kib > 0: only if the cache holds more than that.
  boost::asio::awaitable<std::expected<TrimStats, VmError>> Trim(Sandbox& sb, uint64_t above_kib = 0);
  void WatchQemu(const std::shared_ptr<Sandbox>& sb);
  void KickRefill();
  std::string NewId();

  boost::asio::any_io_executor executor_;
  Jailer& jailer_;
  VmHostConfig config_;
  v1::TemplateManifest manifest_;
  std::string accelerator_;
  SlotPool slots_;
  VmPools pools_;
  Restorer restorer_;
  uint64_t trims_total_ = 0;
  std::map<std::string, std::shared_ptr<Sandbox>> sandboxes_;
  boost::asio::steady_timer refill_timer_;
  bool refilling_ = false;
  bool started_ = false;
  bool refill_started_ = false;
  bool trim_loop_running_ = false;
  bool refill_exited_ = false;
  bool shutting_down_ = false;
  TransitionObserver observer_;
  BrowserObserver browser_observer_;
  InUse in_use_;
  size_t client_restores_ = 0;  // creates restoring for a waiting client (refills hold back)
  size_t background_refreshes_ = 0;  // RefreshInBackground coroutines running
  size_t refresh_limit_ = 1;
  size_t refresh_turns_ = 0;  // refreshes holding a turn
  std::deque<std::shared_ptr<boost::asio::steady_timer>> refresh_queue_;  // waiting for one
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace deskbox::vmhost
