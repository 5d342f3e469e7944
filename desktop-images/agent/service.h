// AgentService: turns Requests into Responses. Knows nothing about the port: the I/O loop
// (port.h) hands it each parsed Request, in arrival order, with a Reply bound to the current
// host connection. Quick requests are answered on the calling thread; long ones run on the
// TaskRunner so a Ping is never stuck behind an Exec.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "agent.pb.h"
#include "agent/clock.h"
#include "agent/desktop_probe.h"
#include "agent/file_transfer.h"
#include "agent/process.h"
#include "agent/readiness.h"
#include "agent/reply.h"
#include "agent/system_control.h"
#include "agent/task_runner.h"

namespace deskbox::agent {

inline constexpr uint32_t kProtocolVersion = 1;

struct ExecLimits {
  uint32_t default_timeout_s = 60;
  uint32_t max_timeout_s = 3600;
  uint64_t default_output_bytes = 4u << 20;
  uint64_t max_output_bytes = 6u << 20;  // two full streams still fit one 16 MiB frame
  std::chrono::milliseconds drain_after_exit{1000};
  std::string default_cwd = "/root";
  // A cgroup v2 directory every exec command joins before it starts (its pids and memory
  // limits, set by the guest's init); empty: commands run in the agent's own cgroup.
  std::string cgroup;
  // Where the root filesystem's quota base for exec commands (uid 0) is kept; empty: exec
  // commands have no disk limit here (the agent's --exec-disk-mib sets it).
  std::string disk_base_file;
};

struct ClipboardLimits {
  size_t max_text_bytes = 1u << 20;
  std::chrono::milliseconds timeout{5000};
  std::string display = ":0";
};

struct AgentLimits {
  ExecLimits exec;
  FileLimits file;
  ClipboardLimits clipboard;
  ReadinessOptions ready;
  size_t reseed_min_bytes = 32;
  size_t reseed_max_bytes = 512;
};

struct AgentDeps {
  Clock& clock;
  SystemControl& system;
  ProcessRunner& processes;
  DesktopProbe& desktop;
  TaskRunner& tasks;
};

class AgentService {
 public:
  explicit AgentService(AgentDeps deps, AgentLimits limits = {});
  ~AgentService();  // waits for the workers it started
  AgentService(const AgentService&) = delete;
  AgentService& operator=(const AgentService&) = delete;

  // Handles one request. Every request gets exactly one terminal Response (Error included),
  // except FileWrite chunks other than the last (answered only on error) and FileRead (a
  // stream of FileChunk ending in a final one or an Error). Call from one thread.
  void Handle(const pb::Request& request, const Reply& reply);

  // Periodic housekeeping, from the same thread as Handle: drops abandoned file writes.
  void Tick();
  // The host connection went away: unfinished file writes can never complete.
  void OnDisconnect();

  // The minimal default environment of Exec, before the request's own variables.
  static std::vector<std::string> BuildExecEnv(const pb::ExecRequest& request);

 private:
  void HandlePing(uint64_t id, const Reply& reply);
  void HandleSetClock(uint64_t id, const pb::SetClock& request, const Reply& reply);
  void HandleReseed(uint64_t id, const pb::Reseed& request, const Reply& reply);
  void HandleSetLimits(uint64_t id, const pb::SetLimits& request, const Reply& reply);
  void HandleReady(uint64_t id, const pb::ReadyRequest& request, const Reply& reply);
  void HandleExec(uint64_t id, const pb::ExecRequest& request, const Reply& reply);
  void HandleFileRead(uint64_t id, const pb::FileReadRequest& request, const Reply& reply);
  void HandleClipboardGet(uint64_t id, const Reply& reply);
  void HandleClipboardSet(uint64_t id, const pb::ClipboardSet& request, const Reply& reply);
  // Runs `task` on a worker, or answers "busy" if none is free.
  void RunLong(uint64_t id, std::string_view what, const Reply& reply, std::function<void()> task);
  std::expected<ExecSpec, AgentError> ValidateExec(const pb::ExecRequest& request) const;

  AgentDeps deps_;
  const AgentLimits limits_;
  ReadinessChecker readiness_;
  FileWriter files_;
};

}  // namespace deskbox::agent
