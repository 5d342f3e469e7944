#pragma once
// A sandbox's lifecycle states and the one table of allowed transitions.
//
//   creating ──▶ running ◀──▶ paused
//      │            │            │
//      └──▶ failed ◀┴────────────┘        any state ──▶ stopped (destroy; terminal)
//
// creating: slot taken, QEMU restoring. running: guest executing, agent answered.
// paused: vCPUs stopped (QMP stop), RAM kept. failed: QEMU died or a step failed; resources
// are released as soon as the failure is seen, the record stays for the owner to read.
// stopped: destroyed, nothing left on the host.
#include <cstdint>
#include <optional>
#include <string_view>

namespace deskbox::vmhost {

enum class SandboxState : uint8_t { kCreating, kRunning, kPaused, kFailed, kStopped };

std::string_view ToString(SandboxState s);
// The state a name (as ToString gives it) stands for.
std::optional<SandboxState> ParseSandboxState(std::string_view name);
bool CanTransition(SandboxState from, SandboxState to);

}  // namespace deskbox::vmhost
