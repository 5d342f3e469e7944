#include "agent/service.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>

#include "agent/log.h"
#include "agent/text.h"
#include "agent/unique_fd.h"

namespace deskbox::agent {
namespace {

constexpr std::string_view kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

bool HasNul(std::string_view s) { return s.find('\0') != std::string_view::npos; }

pb::Response AckResponse(uint64_t id) {
  pb::Response response;
  response.set_id(id);
  response.mutable_ack();
  return response;
}

std::string ProgramForLog(const pb::ExecRequest& request) {
  if (request.argv_size() == 0) return "sh -c";
  const std::string& argv0 = request.argv(0);
  // The program's name only: arguments may hold secrets.
  return Abbreviate(argv0.substr(argv0.rfind('/') + 1), 64);
}

// The environment of the X clipboard helper.
std::vector<std::string> HelperEnv(const std::string& display) {
  return {"PATH=" + std::string(kDefaultPath), "HOME=/root", "LANG=C.UTF-8",
          "DISPLAY=" + display};
}

}  // namespace

AgentService::AgentService(AgentDeps deps, AgentLimits limits)
    : deps_(deps),
      limits_(std::move(limits)),
      readiness_(deps.clock, deps.desktop, deps.system, limits_.ready),
      files_(deps.clock, deps.tasks, limits_.file) {}

AgentService::~AgentService() {
  // Workers hold `this`; they must be done before the members they use go away.
  deps_.tasks.JoinAll();
}

void AgentService::Handle(const pb::Request& request, const Reply& raw_reply) {
  // Every text field leaves as valid UTF-8, or the host could not parse the frame at all.
  const Reply reply = [raw_reply](pb::Response response) {
    if (SanitizeResponseText(response)) {
      Log("response id=", response.id(), ": replaced invalid UTF-8 in a text field");
    }
    return raw_reply(std::move(response));
  };
  const uint64_t id = request.id();
  switch (request.kind_case()) {
    case pb::Request::kPing:
      return HandlePing(id, reply);
    case pb::Request::kSetClock:
      return HandleSetClock(id, request.set_clock(), reply);
    case pb::Request::kReseed:
      return HandleReseed(id, request.reseed(), reply);
    case pb::Request::kSetLimits:
      return HandleSetLimits(id, request.set_limits(), reply);
    case pb::Request::kReady:
      return HandleReady(id, request.ready(), reply);
    case pb::Request::kExec:
      return HandleExec(id, request.exec(), reply);
    case pb::Request::kFileRead:
      return HandleFileRead(id, request.file_read(), reply);
    case pb::Request::kFileWrite:
      return files_.HandleChunk(id, request.file_write(), reply);
    case pb::Request::kClipboardGet:
      return HandleClipboardGet(id, reply);
    case pb::Request::kClipboardSet:
      return HandleClipboardSet(id, request.clipboard_set(), reply);
    case pb::Request::KIND_NOT_SET:
      break;
  }
  // A newer host's request kind (an unknown oneof field parses as "not set").
  Log("request id=", id, ": unknown kind");
  reply(ErrorResponse(id, MakeError(pb::Error::UNSUPPORTED, "unknown request kind")));
}

void AgentService::Tick() { files_.ExpireIdle(); }

void AgentService::OnDisconnect() { files_.DiscardAll(); }

void AgentService::RunLong(uint64_t id, std::string_view what, const Reply& reply,
                           std::function<void()> task) {
  if (deps_.tasks.TrySpawn(std::move(task))) return;
  Log(what, " id=", id, ": rejected, all workers busy");
  reply(ErrorResponse(id, MakeError(pb::Error::INTERNAL, "agent busy: too many requests in progress")));
}

void AgentService::HandlePing(uint64_t id, const Reply& reply) {
  pb::Response response;
  response.set_id(id);
  auto* pong = response.mutable_pong();
  pong->set_protocol_version(kProtocolVersion);
  pong->set_guest_monotonic_ns(static_cast<uint64_t>(deps_.clock.MonotonicNs()));
  pong->set_guest_realtime_ns(deps_.clock.RealtimeNs());
  reply(std::move(response));
}

void AgentService::HandleSetClock(uint64_t id, const pb::SetClock& request, const Reply& reply) {
  if (request.unix_time_ns() <= 0) {
    reply(ErrorResponse(id, MakeError(pb::Error::INVALID_ARGUMENT, "unix_time_ns must be > 0")));
    return;
  }
  const int64_t before = deps_.clock.RealtimeNs();
  if (auto set = deps_.system.SetRealtime(request.unix_time_ns()); !set) {
    Log("set_clock id=", id, " failed: ", set.error().message);
    reply(ErrorResponse(id, set.error()));
    return;
  }
  Log("set_clock id=", id, ": realtime moved by ", (request.unix_time_ns() - before) / 1'000'000,
      " ms");
  reply(AckResponse(id));
}

void AgentService::HandleSetLimits(uint64_t id, const pb::SetLimits& request, const Reply& reply) {
  const std::string& cg = limits_.exec.cgroup;
  if (cg.empty()) {
    reply(ErrorResponse(id, MakeError(pb::Error::UNSUPPORTED, "exec commands have no cgroup here")));
    return;
  }
  if (request.exec_memory_bytes() != 0 && request.exec_memory_bytes() < (1u << 20)) {
    reply(ErrorResponse(id, MakeError(pb::Error::INVALID_ARGUMENT, "exec_memory_bytes under 1 MiB")));
    return;
  }
  if (request.exec_disk_bytes() != 0 && request.exec_disk_bytes() < (1u << 20)) {
    reply(ErrorResponse(id, MakeError(pb::Error::INVALID_ARGUMENT, "exec_disk_bytes under 1 MiB")));
    return;
  }
  // A cgroup file takes one write of the whole value.
  auto write = [&](const char* name, uint64_t value) -> std::expected<void, AgentError> {
    const std::string path = cg + "/" + name;
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    if (!fd) return std::unexpected(ErrnoError(errno, path));
    const std::string text = std::to_string(value) + "\n";
    if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()))
      return std::unexpected(ErrnoError(errno, path));
    return {};
  };
  std::expected<void, AgentError> done;
  if (request.exec_pids_max() != 0) done = write("pids.max", request.exec_pids_max());
  if (done && request.exec_memory_bytes() != 0) done = write("memory.max", request.exec_memory_bytes());
  if (done && request.exec_disk_bytes() != 0) {
    // Commands run as root: their files count against root's quota, above the template's.
    if (limits_.exec.disk_base_file.empty())
      done = std::unexpected(MakeError(pb::Error::UNSUPPORTED, "exec commands have no disk quota here"));
    else
      done = deps_.system.LimitDiskGrowth(0, request.exec_disk_bytes(), limits_.exec.disk_base_file);
  }
  if (!done) {
    Log("set_limits id=", id, " failed: ", done.error().message);
    reply(ErrorResponse(id, done.error()));
    return;
  }
  Log("set_limits id=", id, ": exec pids.max ", request.exec_pids_max(), ", memory.max ",
      request.exec_memory_bytes(), ", disk ", request.exec_disk_bytes(), " (0: unchanged)");
  reply(AckResponse(id));
}

void AgentService::HandleReseed(uint64_t id, const pb::Reseed& request, const Reply& reply) {
  const size_t n = request.entropy().size();
  if (n < limits_.reseed_min_bytes || n > limits_.reseed_max_bytes) {
    reply(ErrorResponse(id, MakeError(pb::Error::INVALID_ARGUMENT,
                                      "entropy must be " + std::to_string(limits_.reseed_min_bytes) +
                                          ".." + std::to_string(limits_.reseed_max_bytes) +
                                          " bytes")));
    return;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(request.entropy().data());
  if (auto done = deps_.system.AddEntropyAndReseed({bytes, n}); !done) {
    Log("reseed id=", id, " failed: ", done.error().message);
    reply(ErrorResponse(id, done.error()));
    return;
  }
  Log("reseed id=", id, ": ", n, " bytes credited, CRNG reseeded");
  reply(AckResponse(id));
}

void AgentService::HandleReady(uint64_t id, const pb::ReadyRequest& request, const Reply& reply) {
  if (request.timeout_ms() > limits_.ready.max_timeout_ms) {
    reply(ErrorResponse(id, MakeError(pb::Error::INVALID_ARGUMENT,
                                      "timeout_ms over " +
                                          std::to_string(limits_.ready.max_timeout_ms))));
    return;
  }
  const uint32_t timeout_ms = request.timeout_ms();
  const bool require_settled = request.require_settled();
  RunLong(id, "ready", reply, [this, id, timeout_ms, require_settled, reply] {
    pb::Response response;
    response.set_id(id);
    *response.mutable_ready() = readiness_.Wait(timeout_ms, require_settled);
    const auto& r = response.ready();
    Log("ready id=", id, ": ready=", r.ready(), " x=", r.x_ready(), " cdp=", r.cdp_ready(),
        " paint=", r.first_paint(), " settled=", r.settled(), " idle=", r.idle_fraction());
    reply(std::move(response));
  });
}

std::vector<std::string> AgentService::BuildExecEnv(const pb::ExecRequest& request) {
  std::map<std::string, std::string> env = {
      {"PATH", std::string(kDefaultPath)},
      {"HOME", "/root"},
      {"LANG", "C.UTF-8"},
      {"DISPLAY", ":0"},
  };
  for (const auto& [key, value] : request.env()) env[key] = value;
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [key, value] : env) out.push_back(key + "=" + value);
  return out;
}

std::expected<ExecSpec, AgentError> AgentService::ValidateExec(
    const pb::ExecRequest& request) const {
  const auto invalid = [](std::string message) {
    return std::unexpected(MakeError(pb::Error::INVALID_ARGUMENT, std::move(message)));
  };
  ExecSpec spec;
  if (request.argv_size() > 0 && !request.shell().empty()) {
    return invalid("argv and shell are exclusive");
  }
  if (request.argv_size() > 0) {
    if (request.argv(0).empty()) return invalid("argv[0] is empty");
    for (const auto& arg : request.argv()) {
      if (HasNul(arg)) return invalid("argv contains NUL");
      spec.argv.push_back(arg);
    }
  } else if (!request.shell().empty()) {
    if (HasNul(request.shell())) return invalid("shell contains NUL");
    spec.argv = {"/bin/sh", "-c", request.shell()};
  } else {
    return invalid("argv or shell is required");
  }
  for (const auto& [key, value] : request.env()) {
    if (key.empty() || key.find('=') != std::string::npos || HasNul(key) || HasNul(value)) {
      return invalid("bad environment variable name or value");
    }
  }
  spec.env = BuildExecEnv(request);

  spec.cwd = request.cwd().empty() ? limits_.exec.default_cwd : request.cwd();
  if (spec.cwd.front() != '/' || HasNul(spec.cwd)) return invalid("cwd must be absolute");
  struct stat st{};
  if (::stat(spec.cwd.c_str(), &st) != 0) {
    return std::unexpected(ErrnoError(errno, "cwd " + spec.cwd));
  }
  if (!S_ISDIR(st.st_mode)) return invalid("cwd is not a directory");

  const uint32_t timeout_s =
      request.timeout_s() == 0 ? limits_.exec.default_timeout_s : request.timeout_s();
  if (timeout_s > limits_.exec.max_timeout_s) {
    return invalid("timeout_s over " + std::to_string(limits_.exec.max_timeout_s));
  }
  spec.timeout = std::chrono::seconds(timeout_s);
  const uint64_t max_output = request.max_output_bytes() == 0 ? limits_.exec.default_output_bytes
                                                              : request.max_output_bytes();
  if (max_output > limits_.exec.max_output_bytes) {
    return invalid("max_output_bytes over " + std::to_string(limits_.exec.max_output_bytes));
  }
  spec.max_output_bytes = max_output;
  spec.stdin_data = request.stdin();
  spec.drain_after_exit = limits_.exec.drain_after_exit;
  spec.cgroup = limits_.exec.cgroup;
  return spec;
}

void AgentService::HandleExec(uint64_t id, const pb::ExecRequest& request, const Reply& reply) {
  auto spec = ValidateExec(request);
  if (!spec) {
    Log("exec id=", id, " rejected: ", spec.error().message);
    reply(ErrorResponse(id, spec.error()));
    return;
  }
  std::string program = ProgramForLog(request);
  RunLong(id, "exec", reply,
          [this, id, spec = std::move(*spec), program = std::move(program), reply] {
            auto outcome = deps_.processes.Run(spec);
            if (!outcome) {
              Log("exec id=", id, " ", program, " failed to start: ", outcome.error().message);
              reply(ErrorResponse(id, outcome.error()));
              return;
            }
            Log("exec id=", id, " ", program, ": exit=", outcome->exit_code,
                " signal=", outcome->signal, " timed_out=", outcome->timed_out,
                " ms=", outcome->duration_ms, " stdout=", outcome->stdout_data.size(),
                "B stderr=", outcome->stderr_data.size(), "B",
                outcome->truncated ? " (truncated)" : "");
            pb::Response response;
            response.set_id(id);
            auto* result = response.mutable_exec();
            result->set_exit_code(outcome->exit_code);
            result->set_signal(outcome->signal);
            result->set_stdout(std::move(outcome->stdout_data));
            result->set_stderr(std::move(outcome->stderr_data));
            result->set_truncated(outcome->truncated);
            result->set_timed_out(outcome->timed_out);
            result->set_duration_ms(outcome->duration_ms);
            reply(std::move(response));
          });
}

void AgentService::HandleFileRead(uint64_t id, const pb::FileReadRequest& request,
                                  const Reply& reply) {
  // Cheap checks up front so that obvious mistakes do not take a worker.
  if (auto valid = ValidateAbsolutePath(request.path(), limits_.file.max_path_bytes); !valid) {
    Log("file_read id=", id, " rejected: ", valid.error().message);
    reply(ErrorResponse(id, valid.error()));
    return;
  }
  RunLong(id, "file_read", reply, [this, id, request, reply] {
    const uint64_t sent = StreamFile(id, request, limits_.file, reply);
    Log("file_read id=", id, " ", request.path(), ": ", sent, " bytes sent");
  });
}

void AgentService::HandleClipboardGet(uint64_t id, const Reply& reply) {
  RunLong(id, "clipboard_get", reply, [this, id, reply] {
    const auto& limits = limits_.clipboard;
    ExecSpec spec;
    spec.argv = {"xclip", "-selection", "clipboard", "-o"};
    spec.env = HelperEnv(limits.display);
    spec.cwd = "/";
    spec.max_output_bytes = limits.max_text_bytes;
    spec.timeout = limits.timeout;
    spec.drain_after_exit = std::chrono::milliseconds(200);
    auto outcome = deps_.processes.Run(spec);
    if (!outcome) {
      reply(ErrorResponse(id, outcome.error()));
      return;
    }
    if (outcome->timed_out) {
      reply(ErrorResponse(id, MakeError(pb::Error::TIMEOUT, "xclip -o timed out")));
      return;
    }
    if (outcome->truncated) {
      reply(ErrorResponse(id, MakeError(pb::Error::TOO_LARGE,
                                        "clipboard over " + std::to_string(limits.max_text_bytes) +
                                            " bytes")));
      return;
    }
    pb::Response response;
    response.set_id(id);
    if (outcome->exit_code != 0) {
      // xclip fails with "target ... not available" when nothing owns the clipboard.
      if (outcome->stderr_data.find("not available") == std::string::npos) {
        Log("clipboard_get id=", id, ": xclip exited ", outcome->exit_code);
        reply(ErrorResponse(id, MakeError(pb::Error::INTERNAL,
                                          "xclip -o exited " + std::to_string(outcome->exit_code) +
                                              ": " + Abbreviate(outcome->stderr_data, 200))));
        return;
      }
      outcome->stdout_data.clear();
    }
    Log("clipboard_get id=", id, ": ", outcome->stdout_data.size(), " bytes");
    response.mutable_clipboard()->set_text(std::move(outcome->stdout_data));
    reply(std::move(response));
  });
}

void AgentService::HandleClipboardSet(uint64_t id, const pb::ClipboardSet& request,
                                      const Reply& reply) {
  const auto& limits = limits_.clipboard;
  if (request.text().size() > limits.max_text_bytes) {
    reply(ErrorResponse(id, MakeError(pb::Error::TOO_LARGE,
                                      "clipboard text over " +
                                          std::to_string(limits.max_text_bytes) + " bytes")));
    return;
  }
  if (!IsValidUtf8(request.text())) {
    reply(ErrorResponse(id, MakeError(pb::Error::INVALID_ARGUMENT, "text is not UTF-8")));
    return;
  }
  RunLong(id, "clipboard_set", reply, [this, id, text = request.text(), reply] {
    const auto& limits = limits_.clipboard;
    ExecSpec spec;
    spec.argv = {"xclip", "-selection", "clipboard", "-i"};
    spec.env = HelperEnv(limits.display);
    spec.cwd = "/";
    spec.stdin_data = text;
    spec.timeout = limits.timeout;
    // xclip -i forks a process that owns the selection until someone else takes it; it must
    // not inherit pipes the agent would wait on, and it is not killed when xclip returns.
    spec.capture_output = false;
    spec.drain_after_exit = std::chrono::milliseconds(0);
    auto outcome = deps_.processes.Run(spec);
    if (!outcome) {
      reply(ErrorResponse(id, outcome.error()));
      return;
    }
    if (outcome->timed_out) {
      reply(ErrorResponse(id, MakeError(pb::Error::TIMEOUT, "xclip -i timed out")));
      return;
    }
    if (outcome->exit_code != 0 || outcome->signal != 0) {
      Log("clipboard_set id=", id, ": xclip exited ", outcome->exit_code);
      reply(ErrorResponse(id, MakeError(pb::Error::INTERNAL,
                                        "xclip -i exited " + std::to_string(outcome->exit_code))));
      return;
    }
    Log("clipboard_set id=", id, ": ", text.size(), " bytes");
    reply(AckResponse(id));
  });
}

}  // namespace deskbox::agent
