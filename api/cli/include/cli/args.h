#pragma once
// The deskbox command line, parsed into one typed command. No I/O here: the environment comes
// in as a lookup function and files named on the command line are opened by the caller.
#include <cstdint>
#include <expected>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cli/server_url.h"

namespace deskbox::cli {

inline constexpr std::string_view kDefaultUrl = "http://127.0.0.1:8080";

struct GlobalOptions {
  ServerUrl url;
  // Bearer secret: an API key (dbk_…) or a scoped token (dbt_…). Never printed.
  std::optional<std::string> credential;
  // --key-file / DESKBOX_KEY_FILE: read by the caller when credential is empty.
  std::optional<std::string> credential_file;
  // Where the credential came from ("--key", "DESKBOX_KEY", "--key-file", …), for messages
  // that must not show the credential itself. Empty when there is none.
  std::string credential_source;
  bool json = false;
};

struct Resolution {
  uint32_t width = 0;
  uint32_t height = 0;
};

// An egress policy from the command line (docs/egress.md). Only what was given goes into the
// request, so the daemon's defaults apply to the rest. Rules are sent as written, in order:
// the daemon validates them.
struct EgressPolicyArgs {
  std::optional<std::string> default_action;  // "deny" | "allow"
  std::vector<std::string> allow;
  std::vector<std::string> deny;
  bool given() const { return default_action || !allow.empty() || !deny.empty(); }
};

struct CreateCommand {
  std::optional<std::string> template_name;
  std::optional<Resolution> resolution;
  std::optional<uint64_t> timeout_s;
  std::optional<std::string> on_timeout;  // "pause" | "stop"
  std::map<std::string, std::string> metadata;
  EgressPolicyArgs egress;  // sent only when given()
  std::optional<uint64_t> cpu_weight;  // limits (docs/limits.md); the daemon checks the ranges
  std::optional<double> cpu_max;
  std::optional<uint64_t> exec_pids_max, exec_memory_mib, exec_disk_mib;
};
struct ListCommand {
  std::optional<std::string> state;
};
struct ShowCommand {
  std::string id;
};
struct RemoveCommand {
  std::vector<std::string> ids;
};
struct PauseCommand {
  std::string id;
};
struct ResumeCommand {
  std::string id;
};
struct ExecCommand {
  std::string id;
  std::vector<std::string> argv;  // exactly one of argv / shell
  std::optional<std::string> shell;
  std::map<std::string, std::string> env;
  std::optional<std::string> cwd;
  std::optional<uint64_t> timeout_s;
  std::optional<uint64_t> max_output_bytes;
  bool forward_stdin = false;
};
struct CopyCommand {
  enum class Direction { kUpload, kDownload };
  Direction direction = Direction::kUpload;
  std::string local;  // "-" = stdin (upload) / stdout (download)
  std::string sandbox_id;
  std::string remote_path;  // absolute; for uploads a trailing '/' means "local basename here"
  std::optional<std::string> mode;  // octal, uploads only
  bool parents = false;             // uploads only
};
struct ScreenshotCommand {
  std::string id;
  std::string output;  // "-" = stdout
  std::string format;  // "png" | "jpeg"
};
struct TokenCreateCommand {
  std::string sandbox_id;
  std::string scope;  // "view" | "control" | "cdp"; the replay command asks for "replay"
  std::optional<uint64_t> ttl_s;
};
struct TokenListCommand {
  std::string sandbox_id;
};
struct TokenRemoveCommand {
  std::string token_id;
};
struct EventsCommand {
  std::string id;
  uint64_t since = 0;
  bool follow = false;
};
struct EgressShowCommand {
  std::string id;
};
// Replaces the whole policy: fields not given take the daemon's defaults, not the old values.
struct EgressSetCommand {
  std::string id;
  EgressPolicyArgs policy;
};
// The recording commands (docs/recording.md).
// Segment files are named with six digits (000003.mp4), so indexes end at 999999.
inline constexpr uint32_t kMaxSegmentIndex = 999999;
struct RecordingShowCommand {
  std::string id;
};
struct RecordingGetCommand {
  std::string id;
  std::optional<uint32_t> segment;  // one segment instead of the whole recording.mp4
  std::string output;               // "-" = stdout; defaults filled in by the parser
};
struct RecordingVerifyCommand {
  std::string id;
};
struct RecordingRemoveCommand {
  std::string id;
};
// Mints a replay token and prints the replay page's URL with it.
struct ReplayCommand {
  std::string id;
  std::optional<uint64_t> ttl_s;
};
struct KeyListCommand {};
struct KeyCreateCommand {
  std::string name;
};
struct KeyRemoveCommand {
  std::string key_id;
};
struct TemplatesCommand {};

using Command =
    std::variant<CreateCommand, ListCommand, ShowCommand, RemoveCommand, PauseCommand,
                 ResumeCommand, ExecCommand, CopyCommand, ScreenshotCommand, TokenCreateCommand,
                 TokenListCommand, TokenRemoveCommand, EventsCommand, EgressShowCommand,
                 EgressSetCommand, RecordingShowCommand, RecordingGetCommand,
                 RecordingVerifyCommand, RecordingRemoveCommand, ReplayCommand, KeyListCommand,
                 KeyCreateCommand, KeyRemoveCommand, TemplatesCommand>;

struct Invocation {
  GlobalOptions global;
  Command command;
};

// Why there is no Invocation: help was asked for (print `usage` to stdout, exit 0) or the
// command line is wrong (print `message` and `usage` to stderr, exit 2).
struct ParseFailure {
  enum class Kind { kHelp, kUsage };
  Kind kind = Kind::kUsage;
  std::string message;  // empty for kHelp
  std::string usage;    // the whole usage text, or the one command's
};

// Returns the value of an environment variable, or nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(std::string_view name)>;

// args excludes argv[0]. Global options may come before the command or among its options
// (not after "--" or inside exec's ARGV). Precedence: --url, DESKBOX_URL, the default;
// --key/--token, --key-file, DESKBOX_KEY, DESKBOX_API_KEY, DESKBOX_TOKEN, DESKBOX_KEY_FILE.
std::expected<Invocation, ParseFailure> ParseArgs(std::span<const std::string> args,
                                                  const EnvLookup& env);

std::string MainUsage();

// "sb-1:/tmp/x" → {"sb-1", "/tmp/x"}. As with scp, an argument is remote when it has a ':'
// and no '/' before it ("./a:b" is local). The path is returned as written; callers check it
// is absolute. nullopt when `arg` is local.
struct RemoteSpec {
  std::string sandbox_id;
  std::string path;
};
std::optional<RemoteSpec> ParseRemoteSpec(std::string_view arg);

}  // namespace deskbox::cli
