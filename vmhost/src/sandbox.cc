#include "vmhost/sandbox.h"

namespace deskbox::vmhost {

std::string_view ToString(SandboxState s) {
  switch (s) {
    case SandboxState::kCreating: return "creating";
    case SandboxState::kRunning: return "running";
    case SandboxState::kPaused: return "paused";
    case SandboxState::kFailed: return "failed";
    case SandboxState::kStopped: return "stopped";
  }
  return "unknown";
}

std::optional<SandboxState> ParseSandboxState(std::string_view name) {
  for (auto s : {SandboxState::kCreating, SandboxState::kRunning, SandboxState::kPaused, SandboxState::kFailed,
                 SandboxState::kStopped})
    if (ToString(s) == name) return s;
  return std::nullopt;
}

bool CanTransition(SandboxState from, SandboxState to) {
  using S = SandboxState;
  if (from == S::kStopped) return false;  // terminal
  if (to == S::kStopped) return true;     // destroy is always allowed
  switch (from) {
    case S::kCreating: return to == S::kRunning || to == S::kFailed;
    case S::kRunning: return to == S::kPaused || to == S::kFailed;
    case S::kPaused: return to == S::kRunning || to == S::kFailed;
    case S::kFailed: return false;
    case S::kStopped: return false;
  }
  return false;
}

}  // namespace deskbox::vmhost
