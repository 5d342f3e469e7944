#pragma once
// Restorer: the steps that turn a pre-started QEMU (waiting in -incoming defer, QMP handshake
// done) into a running guest that is fit to hand out:
//  - Restore: load the template's state file, run the guest, wait until its agent answers;
//  - HandOut: set the guest's clock and reseed its RNG (every clone starts from the snapshot's).
// It talks only to the VM's two channels, so its tests run against scripted peers
// (tests/vmhost/restorer_test.cc); SandboxManager decides when each step runs.
//
// Threads: the io_context's of the channels.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <expected>
#include <string>

#include "vmhost/agent_client.h"
#include "vmhost/qmp.h"
#include "vmhost/sandbox_host.h"

namespace deskbox::vmhost {

struct RestoreSettings {
  std::string state_file;                         // the template's saved state (migration stream)
  std::chrono::milliseconds restore_timeout{30000};  // until QEMU reports the load completed
  std::chrono::milliseconds ready_timeout{60000};    // until the restored agent answers
  // One ping of the agent: a request the agent dropped while it reopened its port (the restored
  // port state says the host was connected before the snapshot) costs this, not ready_timeout.
  std::chrono::milliseconds ping_try{2000};
  // One hand-out request (clock, reseed); one that times out is sent once more after a ping.
  std::chrono::milliseconds hand_out_try{10000};
  std::chrono::milliseconds hand_out_ping{20000};
};

class Restorer {
 public:
  explicit Restorer(RestoreSettings settings) : settings_(std::move(settings)) {}

  // migrate-set-capabilities (x-ignore-shared), migrate-incoming from the state file, the
  // MIGRATION event, cont, then the agent answers a ping. Errors: kQemu for what QEMU refused or
  // did not finish (with its error-desc), kAgent when the guest's agent does not answer.
  boost::asio::awaitable<std::expected<void, VmError>> Restore(QmpClient& qmp, AgentClient& agent) const;
  // The guest's clock set to the host's and its RNG reseeded, both requests in flight at once.
  // A request the agent does not answer in time is sent again after a ping gets through.
  boost::asio::awaitable<std::expected<void, VmError>> HandOut(AgentClient& agent, uint32_t slot) const;
  // Pings with short tries until one is answered or `timeout` passes (kAgent then).
  boost::asio::awaitable<std::expected<void, VmError>> PingAgent(AgentClient& agent,
                                                                 std::chrono::milliseconds timeout) const;

 private:
  boost::asio::awaitable<std::expected<void, VmError>> HandOutStep(AgentClient& agent, uint32_t slot, bool clock) const;

  RestoreSettings settings_;
};

}  // namespace deskbox::vmhost
