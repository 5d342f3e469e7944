#include "commands.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "common/base64.h"
#include "cli/output.h"
#include "cli/requests.h"
#include "common/unique_fd.h"
#include "http_client.h"

namespace deskbox::cli {
namespace {

using Seconds = std::chrono::seconds;

constexpr Seconds kDefaultWait{60};
// Creating may have to cold-boot a VM when the pools are empty.
constexpr Seconds kCreateWait{300};
// Time a transfer may go without a byte moving.
constexpr Seconds kTransferIdle{120};
// On top of exec's own timeout: the daemon's and the guest agent's overhead.
constexpr Seconds kExecSlack{30};
constexpr size_t kMaxEventLine = 4 << 20;

// Writes all of `data` to fd; returns errno on failure.
int WriteAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return 0;
}

void Error(std::string_view message) {
  std::string line = fmt::format("deskbox: {}\n", message);
  WriteAll(STDERR_FILENO, line);
}

bool Print(std::string_view text) {
  if (int err = WriteAll(STDOUT_FILENO, text)) {
    if (err != EPIPE) Error(fmt::format("writing stdout: {}", std::strerror(err)));
    return false;
  }
  return true;
}

std::string Basename(std::string_view path) {
  while (path.size() > 1 && path.ends_with('/')) path.remove_suffix(1);
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string Dirname(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

class Runner {
 public:
  explicit Runner(const Invocation& inv)
      : global_(inv.global), client_(inv.global.url, inv.global.credential) {}

  int operator()(const CreateCommand& c) {
    return PrintResult(Call(CreateRequest(c), kCreateWait),
                       [](const Json& j) { return Scalar(Field(j, "id")) + "\n"; });
  }
  int operator()(const ListCommand& c) {
    return PrintResult(Call(ListRequest(c)), FormatSandboxList);
  }
  int operator()(const ShowCommand& c) {
    return PrintResult(Call(ShowRequest(c.id)), FormatSandbox);
  }
  int operator()(const RemoveCommand& c) {
    int status = 0;
    for (const auto& id : c.ids) {
      auto r = Call(RemoveRequest(id), kCreateWait, c.ids.size() > 1 ? id : "");
      if (!r) status = r.error();
    }
    return status;
  }
  int operator()(const PauseCommand& c) { return PrintResult(Call(PauseRequest(c.id)), Quiet); }
  int operator()(const ResumeCommand& c) { return PrintResult(Call(ResumeRequest(c.id)), Quiet); }
  int operator()(const ExecCommand& c);
  int operator()(const CopyCommand& c) {
    return c.direction == CopyCommand::Direction::kUpload ? Upload(c) : DownloadFile(c);
  }
  int operator()(const ScreenshotCommand& c) { return DownloadTo(ScreenshotRequest(c), c.output); }
  int operator()(const TokenCreateCommand& c) {
    return PrintResult(Call(TokenCreateRequest(c)),
                       [](const Json& j) { return Scalar(Field(j, "token")) + "\n"; });
  }
  int operator()(const TokenListCommand& c) {
    return PrintResult(Call(TokenListRequest(c.sandbox_id)), FormatTokenList);
  }
  int operator()(const TokenRemoveCommand& c) {
    auto r = Call(TokenRemoveRequest(c.token_id));
    return r ? 0 : r.error();
  }
  int operator()(const EventsCommand& c) { return c.follow ? FollowEvents(c) : ListEvents(c); }
  int operator()(const EgressShowCommand& c) {
    return PrintResult(Call(EgressShowRequest(c.id)), FormatEgressPolicy);
  }
  int operator()(const EgressSetCommand& c) {
    return PrintResult(Call(EgressSetRequest(c)), FormatEgressPolicy);
  }
  int operator()(const RecordingShowCommand& c) {
    return PrintResult(Call(RecordingRequest(c.id)), FormatRecording);
  }
  int operator()(const RecordingGetCommand& c) {
    return DownloadTo(RecordingVideoRequest(c), c.output);
  }
  int operator()(const RecordingVerifyCommand& c);
  int operator()(const RecordingRemoveCommand& c) {
    auto r = Call(RecordingRemoveRequest(c.id));
    return r ? 0 : r.error();
  }
  int operator()(const ReplayCommand& c);
  int operator()(const KeyListCommand&) {
    return PrintResult(Call(KeyListRequest()), FormatKeyList);
  }
  int operator()(const KeyCreateCommand& c) {
    return PrintResult(Call(KeyCreateRequest(c.name)),
                       [](const Json& j) { return Scalar(Field(j, "key")) + "\n"; });
  }
  int operator()(const KeyRemoveCommand& c) {
    auto r = Call(KeyRemoveRequest(c.key_id));
    return r ? 0 : r.error();
  }
  int operator()(const TemplatesCommand&) {
    return PrintResult(Call(TemplatesRequest()), FormatTemplateList);
  }

 private:
  struct Result {
    Json json;        // discarded (is_discarded()) when the body is not JSON
    std::string raw;  // the body as received
  };

  static std::string Quiet(const Json&) { return {}; }

  // Reports a failed exchange; returns the exit status (1). `what` prefixes the message when
  // one command makes several requests (rm A B).
  int ReportApiError(const HttpResponse& r, std::string_view what = {}) {
    std::string message = FormatApiError(r.status, r.reason, r.body);
    if (r.status == 401) {
      if (!global_.credential)
        message += " (no API key: set DESKBOX_KEY or pass --key or --key-file)";
      else
        message += fmt::format(" (credential from {})", global_.credential_source);
    }
    if (r.status == 429 && !r.retry_after.empty())
      message += fmt::format(" (retry after {} s)", Printable(r.retry_after));
    Error(what.empty() ? message : fmt::format("{}: {}", what, message));
    return 1;
  }

  std::expected<Result, int> Call(const ApiRequest& req, Seconds wait = kDefaultWait,
                                  std::string_view what = {}) {
    auto r = client_.Call(req, wait);
    if (!r) {
      Error(what.empty() ? r.error().message : fmt::format("{}: {}", what, r.error().message));
      return std::unexpected(1);
    }
    if (!r->ok()) return std::unexpected(ReportApiError(*r, what));
    Result out{Json::parse(r->body, nullptr, false), std::move(r->body)};
    return out;
  }

  // Prints the response: with --json as the daemon sent it (indented), else via `human`.
  template <typename Human>
  int PrintResult(const std::expected<Result, int>& r, Human&& human) {
    if (!r) return r.error();
    if (global_.json) {
      if (r->raw.empty()) return 0;
      std::string text = r->json.is_discarded() ? r->raw : Pretty(r->json);
      return Print(text) ? 0 : 1;
    }
    if (r->json.is_discarded()) {
      Error("the daemon's response is not JSON");
      return 1;
    }
    return Print(human(r->json)) ? 0 : 1;
  }

  int Upload(const CopyCommand& c);
  int DownloadFile(const CopyCommand& c);
  int DownloadTo(const ApiRequest& req, const std::string& local);
  int ListEvents(const EventsCommand& c);
  int FollowEvents(const EventsCommand& c);

  const GlobalOptions& global_;
  ApiClient client_;
};

int Runner::operator()(const ExecCommand& c) {
  std::optional<std::string> stdin_bytes;
  if (c.forward_stdin) {
    std::string data;
    std::array<char, 64 * 1024> piece;
    for (;;) {
      ssize_t n = ::read(STDIN_FILENO, piece.data(), piece.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        Error(fmt::format("reading stdin: {}", std::strerror(errno)));
        return 1;
      }
      if (n == 0) break;
      data.append(piece.data(), static_cast<size_t>(n));
      if (data.size() > kMaxExecStdinBytes) {
        Error(
            fmt::format("stdin is larger than {} KiB; copy it in with `deskbox cp - {}:/PATH` "
                        "and redirect the command's input from that file",
                        kMaxExecStdinBytes / 1024, c.id));
        return 1;
      }
    }
    stdin_bytes = std::move(data);
  }
  Seconds wait = Seconds(c.timeout_s.value_or(kDefaultExecTimeoutS)) + kExecSlack;
  auto r = Call(ExecRequest(c, stdin_bytes), wait);
  if (!r) return r.error();
  if (r->json.is_discarded() || !r->json.is_object()) {
    Error("the daemon's exec response is not a JSON object");
    return 1;
  }
  const Json& j = r->json;
  if (global_.json) {
    if (!Print(Pretty(j))) return 1;
    return ExecExitStatus(j);
  }
  bool base64 = Field(j, "encoding") == "base64";
  for (auto [field, fd] :
       {std::pair{"stdout", STDOUT_FILENO}, std::pair{"stderr", STDERR_FILENO}}) {
    auto it = j.find(field);
    if (it == j.end() || !it->is_string()) continue;
    const std::string& text = it->get_ref<const std::string&>();
    std::optional<std::string> bytes = base64 ? Base64Decode(text) : std::optional(text);
    if (!bytes) {
      Error(fmt::format("the daemon sent invalid base64 for {}", field));
      return 1;
    }
    if (int err = WriteAll(fd, *bytes)) {
      if (err != EPIPE) Error(fmt::format("writing {}: {}", field, std::strerror(err)));
      return 1;
    }
  }
  if (Field(j, "truncated") == true) Error("the command's output was truncated (see --max-output)");
  if (Field(j, "timed_out") == true)
    Error(fmt::format("the command timed out after {} s and was killed",
                      c.timeout_s.value_or(kDefaultExecTimeoutS)));
  return ExecExitStatus(j);
}

// Exits 1 when the check found a problem, as when the daemon refused: scripts test the status.
int Runner::operator()(const RecordingVerifyCommand& c) {
  auto r = Call(RecordingVerifyRequest(c.id));
  if (!r) return r.error();
  if (int status = PrintResult(r, FormatVerification); status != 0) return status;
  return VerificationOk(r->json) ? 0 : 1;
}

// Text: the URL alone, for scripts and to paste into a browser. --json: the daemon's token
// response (with the token's id, for `token rm`, and its expiry).
int Runner::operator()(const ReplayCommand& c) {
  auto r = Call(ReplayTokenRequest(c));
  if (!r) return r.error();
  if (global_.json) return PrintResult(r, Quiet);
  const Json& token = Field(r->json, "token");
  if (!token.is_string() || token.get_ref<const std::string&>().empty()) {
    Error("the daemon's token response has no token");
    return 1;
  }
  return Print(ReplayUrl(global_.url, c.id, token.get_ref<const std::string&>()) + "\n") ? 0 : 1;
}

int Runner::Upload(const CopyCommand& c) {
  UniqueFd owned;
  UploadSource source;
  if (c.local == "-") {
    source.fd = STDIN_FILENO;
    source.name = "stdin";
  } else {
    owned.reset(::open(c.local.c_str(), O_RDONLY | O_CLOEXEC));
    if (!owned) {
      Error(fmt::format("{}: {}", c.local, std::strerror(errno)));
      return 1;
    }
    struct stat st {};
    if (::fstat(owned.get(), &st) != 0) {
      Error(fmt::format("{}: {}", c.local, std::strerror(errno)));
      return 1;
    }
    if (S_ISDIR(st.st_mode)) {
      Error(fmt::format("{} is a directory; cp copies one file", c.local));
      return 1;
    }
    source.fd = owned.get();
    source.name = c.local;
    // Pipes and devices have no size known up front: those go chunked.
    if (S_ISREG(st.st_mode)) source.size = static_cast<uint64_t>(st.st_size);
  }
  std::string path = c.remote_path;
  if (path.ends_with('/')) path += Basename(c.local);
  auto r = client_.Upload(UploadRequest(c, path), source, kTransferIdle);
  if (!r) {
    Error(r.error().message);
    return 1;
  }
  if (!r->ok()) return ReportApiError(*r);
  if (global_.json) {
    Json j = Json::parse(r->body, nullptr, false);
    return Print(j.is_discarded() ? r->body : Pretty(j)) ? 0 : 1;
  }
  return 0;
}

int Runner::DownloadFile(const CopyCommand& c) {
  std::string local = c.local;
  struct stat st {};
  if (local != "-" && ::stat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::string name = Basename(c.remote_path);
    if (name.empty() || name == "/") {
      Error(fmt::format("{} names a directory; give a file name", c.remote_path));
      return 1;
    }
    local = (local.ends_with('/') ? local : local + "/") + name;
  }
  return DownloadTo(DownloadRequest(c.sandbox_id, c.remote_path), local);
}

// Streams the body of `req` to `local`: stdout for "-"; a device or pipe directly; a regular
// file through a temporary file in the same directory that replaces it only when complete, so
// a failed download never leaves a truncated file behind.
int Runner::DownloadTo(const ApiRequest& req, const std::string& local) {
  UniqueFd owned;
  int fd = STDOUT_FILENO;
  std::string temp;
  if (local != "-") {
    struct stat st {};
    if (::stat(local.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
      if (S_ISDIR(st.st_mode)) {
        Error(fmt::format("{} is a directory", local));
        return 1;
      }
      owned.reset(::open(local.c_str(), O_WRONLY | O_CLOEXEC));
    } else {
      temp = fmt::format("{}/.{}.deskbox-XXXXXX", Dirname(local), Basename(local));
      owned.reset(::mkostemp(temp.data(), O_CLOEXEC));
    }
    if (!owned) {
      Error(fmt::format("{}: {}", temp.empty() ? local : Dirname(local), std::strerror(errno)));
      return 1;
    }
    fd = owned.get();
  }
  auto discard = [&] {
    if (!temp.empty()) ::unlink(temp.c_str());
  };
  std::string shown = local == "-" ? "stdout" : local;
  auto r = client_.Download(
      req,
      [&](std::string_view piece) -> std::optional<std::string> {
        if (int err = WriteAll(fd, piece))
          return fmt::format("writing {}: {}", shown, std::strerror(err));
        return std::nullopt;
      },
      kTransferIdle);
  if (!r) {
    discard();
    Error(r.error().message);
    return 1;
  }
  if (!r->ok()) {
    discard();
    return ReportApiError(*r);
  }
  if (!temp.empty()) {
    // mkstemp made it 0600; give it the mode a new file would have had.
    mode_t mask = ::umask(0);
    ::umask(mask);
    if (::fchmod(fd, 0666 & ~mask) != 0 || ::close(owned.release()) != 0 ||
        ::rename(temp.c_str(), local.c_str()) != 0) {
      Error(fmt::format("{}: {}", local, std::strerror(errno)));
      discard();
      return 1;
    }
  } else if (owned && ::close(owned.release()) != 0) {
    Error(fmt::format("{}: {}", local, std::strerror(errno)));
    return 1;
  }
  return 0;
}

int Runner::ListEvents(const EventsCommand& c) {
  uint64_t since = c.since;
  for (;;) {
    auto r = Call(EventsRequest(c.id, since, false));
    if (!r) return r.error();
    const Json& events = Field(r->json, "events");
    if (!events.is_array()) {
      Error("the daemon's events response has no \"events\" list");
      return 1;
    }
    std::string lines;
    for (const Json& e : events)
      lines += e.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
    if (!Print(lines)) return 1;
    const Json& next = Field(r->json, "next_since");
    // The last page is short; a daemon that does not advance must not make us loop.
    if (events.size() < kEventsPageLimit || !next.is_number_unsigned() ||
        next.get<uint64_t>() <= since)
      return 0;
    since = next.get<uint64_t>();
  }
}

// The daemon drops a follower that falls too far behind (and may restart); when the stream
// breaks after delivering events, reconnect from the last one printed, so the output has no
// gaps and no repeats.
int Runner::FollowEvents(const EventsCommand& c) {
  uint64_t since = c.since;
  for (;;) {
    std::string partial;
    bool progressed = false;
    bool output_failed = false;
    auto r = client_.Download(
        EventsRequest(c.id, since, true),
        [&](std::string_view piece) -> std::optional<std::string> {
          partial.append(piece);
          size_t start = 0;
          std::string out;
          for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
            std::string_view line(partial.data() + start, nl - start);
            if (line.ends_with('\r')) line.remove_suffix(1);
            if (line.empty()) continue;
            Json event = Json::parse(line, nullptr, false);
            if (const Json& seq = Field(event, "seq"); seq.is_number_unsigned()) {
              since = std::max(since, seq.get<uint64_t>());
              progressed = true;
            }
            out.append(line);
            out.push_back('\n');
          }
          partial.erase(0, start);
          if (partial.size() > kMaxEventLine)
            return fmt::format("an event from the daemon is longer than {} MiB",
                               kMaxEventLine >> 20);
          if (int err = WriteAll(STDOUT_FILENO, out)) {
            output_failed = true;
            return err == EPIPE ? std::string()
                                : fmt::format("writing stdout: {}", std::strerror(err));
          }
          return std::nullopt;
        },
        std::nullopt);
    if (r) {
      if (!r->ok()) return ReportApiError(*r);
      if (!partial.empty() && !Print(partial + "\n")) return 1;
      return 0;
    }
    if (!output_failed && progressed) {
      Error(fmt::format("{}; following again after event {}", r.error().message, since));
      continue;  // an incomplete last line is dropped: it is sent again
    }
    if (!r.error().message.empty()) Error(r.error().message);
    return 1;
  }
}

}  // namespace

int RunCommand(const Invocation& invocation) {
  Runner runner(invocation);
  return std::visit(runner, invocation.command);
}

}  // namespace deskbox::cli
