#include "cli/args.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>

namespace deskbox::cli {
namespace {

constexpr std::string_view kGlobalUsage =
    R"(usage: deskbox [--url URL] [--key KEY | --key-file FILE] [--json] COMMAND [ARGS]

Sandboxes:
  create [--template T] [--resolution WxH] [--timeout S] [--on-timeout pause|stop] [--meta K=V]...
         [--egress-default deny|allow] [--allow RULE]... [--deny RULE]...
  ls [--state STATE]
  show ID
  rm ID...
  pause ID
  resume ID
  exec ID [--cwd DIR] [--env K=V]... [--timeout S] [--stdin] [--] ARGV...
  exec ID [--cwd DIR] [--env K=V]... [--timeout S] [--stdin] --shell 'COMMAND'
  cp LOCAL ID:/PATH           upload ('-' reads stdin)
  cp ID:/PATH LOCAL           download ('-' writes stdout)
  screenshot ID -o FILE [--format png|jpeg]
  events ID [--since SEQ] [--follow]
  egress ID                   print what the sandbox may reach
  egress ID set [--default deny|allow] [--allow RULE]... [--deny RULE]...
                              replace the whole egress policy
  templates
Recordings (docs/recording.md):
  recording ls ID             status and segments of the sandbox's screen recording
  recording get ID [-o FILE] [--segment N]
                              download it as MP4 (default ID.mp4)
  recording verify ID         check the event log and the video files against it
  recording rm ID             delete the video files (the events stay)
  replay ID [--ttl S]         print the URL of the replay page, with a new replay token
Access:
  token ID --scope view|control|cdp [--ttl S]
  token ls ID
  token rm TOKEN_ID
  keys ls | keys create NAME | keys rm KEY_ID

Options (also accepted among a command's options):
  --url URL         daemon, http://HOST[:PORT][/PREFIX]; env DESKBOX_URL,
                    default http://127.0.0.1:8080
  --key KEY         API key or scoped token (--token is the same); env DESKBOX_KEY,
                    DESKBOX_API_KEY or DESKBOX_TOKEN. Prefer the environment or --key-file:
                    other users can see command lines.
  --key-file FILE   read the key from the first line of FILE; env DESKBOX_KEY_FILE
  --json            print the daemon's JSON response instead of text
  -h, --help        this text; `deskbox COMMAND --help` for one command

Exit status: 0 done, 1 the daemon refused or could not be reached, 2 usage error;
exec exits with the command's status (128+N if killed by signal N, 124 if it timed out);
recording verify exits 1 when the check finds a problem.
)";

constexpr std::string_view kCreateUsage = R"(usage: deskbox create [OPTIONS]
Creates a sandbox and prints its id.
  --template T          template name (default: the daemon's)
  --resolution WxH      screen size, e.g. 1280x800
  --timeout S           seconds until --on-timeout applies (1..604800)
  --on-timeout ACTION   pause (default) or stop
  --meta K=V            metadata entry; repeatable
  --egress-default ACTION
                        deny or allow what no egress rule matches (default: the daemon's,
                        deny unless its operator chose otherwise)
  --allow RULE          egress rule to admit; repeatable (see `deskbox egress --help`)
  --deny RULE           egress rule to refuse, checked before --allow; repeatable
Without any of the last three the sandbox gets the daemon's default policy.
  --cpu-weight N        CPU share against other sandboxes, 1..10000 (default 100)
  --cpu-max CPUS        CPU cap, e.g. 0.5 (default: the template's vCPUs); docs/limits.md
  --exec-pids-max N     tasks exec commands may have at once, 16..4096 (default 1024)
  --exec-memory-mib N   memory of exec commands, MiB (default half of the guest's RAM)
  --exec-disk-mib N     how much exec commands' files may add to the disk, MiB (default 512)
)";
constexpr std::string_view kListUsage = R"(usage: deskbox ls [--state STATE]
Lists sandboxes: all but stopped ones, or those in STATE
(creating, running, paused, failed, stopped).
)";
constexpr std::string_view kShowUsage = R"(usage: deskbox show ID
Prints one sandbox, stopped ones too.
)";
constexpr std::string_view kRemoveUsage = R"(usage: deskbox rm ID...
Destroys sandboxes. Removing a stopped one again is not an error.
)";
constexpr std::string_view kPauseUsage = R"(usage: deskbox pause ID
Pauses a running sandbox.
)";
constexpr std::string_view kResumeUsage = R"(usage: deskbox resume ID
Resumes a paused sandbox; its timeout countdown restarts.
)";
constexpr std::string_view kExecUsage = R"(usage: deskbox exec ID [OPTIONS] [--] ARGV...
       deskbox exec ID [OPTIONS] --shell 'COMMAND'
Runs a command in the sandbox and waits for it. Its stdout and stderr are written to ours
byte for byte, and deskbox exits with its status: 128+N if signal N killed it, 124 if it
timed out. Options end at the first word of ARGV.
  --cwd DIR          working directory (absolute)
  --env K=V          environment variable; repeatable
  --timeout S        kill it after S seconds (1..3600, default 60)
  --stdin            send our stdin (up to 720 KiB) as its stdin
  --max-output N     cap stdout and stderr at N bytes each (default: the daemon's)
  --shell COMMAND    run COMMAND with the guest's shell instead of ARGV
)";
constexpr std::string_view kCopyUsage =
    R"(usage: deskbox cp [--mode MODE] [--parents] LOCAL ID:/PATH
       deskbox cp ID:/PATH LOCAL
Copies one file into or out of a sandbox, streamed (up to 1 GiB).
Upload: LOCAL '-' reads stdin; a PATH ending in '/' gets LOCAL's file name.
  --mode MODE   octal permissions of the new file, e.g. 0755
  --parents     create missing parent directories
Download: LOCAL '-' writes stdout; an existing directory gets PATH's file name. The file is
replaced only once the whole download has arrived.
)";
constexpr std::string_view kScreenshotUsage =
    R"(usage: deskbox screenshot ID -o FILE [--format png|jpeg]
Saves the sandbox's screen. FILE '-' writes stdout. The format defaults to jpeg when FILE
ends in .jpg or .jpeg, else png.
)";
constexpr std::string_view kTokenUsage =
    R"(usage: deskbox token ID --scope view|control|cdp [--ttl S]
       deskbox token ls ID
       deskbox token rm TOKEN_ID
Creates a token bound to one sandbox and prints its secret (shown only once), lists a
sandbox's active tokens, or revokes one.
  --scope SCOPE   view, control (includes view), cdp or replay (the recording, events and replay page)
  --ttl S         lifetime in seconds (1..2592000, default 3600)
)";
constexpr std::string_view kEventsUsage = R"(usage: deskbox events ID [--since SEQ] [--follow]
Prints the sandbox's events after SEQ, one JSON object per line (with or without --json).
  --since SEQ   start after this sequence number (default 0: from the start)
  --follow      keep printing new events until the sandbox stops or deskbox is interrupted
)";
constexpr std::string_view kEgressUsage = R"(usage: deskbox egress ID
       deskbox egress ID set [--default deny|allow] [--allow RULE]... [--deny RULE]...
Prints what the sandbox may reach over the network (docs/egress.md): a line "default ACTION",
then "allow RULE" lines, then "deny RULE" lines.
`set` replaces the WHOLE policy with the one given here and prints the result: a list not
given becomes empty, and without --default the daemon's default applies (deny unless its
operator chose otherwise), not the old one. `set` alone leaves just that default. It takes
effect at once: live connections the new policy refuses are cut. Needs an API key (a control
token may only read the policy).
  --default ACTION   deny or allow what no rule matches
  --allow RULE       admit what RULE matches; repeatable, kept in order
  --deny RULE        refuse what RULE matches, checked before --allow; repeatable
RULE: a name (example.com), the names below one (*.example.com), or an address or CIDR
(203.0.113.7, 203.0.113.0/24, 2001:db8::/32), each optionally with ports (example.com:443,
203.0.113.0/24:80,8000-8100, [2001:db8::/32]:443). The daemon checks the rules.
)";
constexpr std::string_view kRecordingUsage = R"(usage: deskbox recording ls ID
       deskbox recording get ID [-o FILE] [--segment N]
       deskbox recording verify ID
       deskbox recording rm ID
The sandbox's screen recording: H.264 video in MP4 segments, each one listed with its SHA-256
in the sandbox's hash-chained event log (docs/recording.md).
ls      prints a line with the status, whether recording is enabled, the size, the length,
        the dropped frames and the problem if it failed; then one line per segment: index,
        start, end, length, size, screen, the first 16 hex digits of its SHA-256, and flags
        (truncated: cut back to its last whole fragment after a crash; live: still written).
get     downloads the whole recording as one MP4 to FILE (default ID.mp4 in the current
        directory), or with --segment N only segment N (default ID-NNNNNN.mp4). FILE '-'
        writes stdout. FILE is replaced only once the whole download has arrived.
verify  checks the event log's chain and every segment file against it. Prints
        "ok: N events, M segments checked, head HEX" and exits 0; else "not ok: …" and one
        line per problem (KIND FILE MESSAGE) and exits 1.
rm      deletes the segment files; the events stay. A running sandbox goes on recording in a
        new segment. Needs an API key.
  -o, --output FILE   where get writes
  --segment N         get only segment N (0..999999; the file NNNNNN.mp4)
)";
constexpr std::string_view kReplayUsage = R"(usage: deskbox replay ID [--ttl S]
Creates a token with scope replay for the sandbox and prints the URL of its replay page (the
video beside the timeline of events) with that token, to open in a browser. The token reads
that sandbox's recording, events and verification and nothing else; whoever has the URL can
use it until it expires. Works for a deleted sandbox while its recording is retained. Needs
an API key.
  --ttl S   lifetime of the token in seconds (1..2592000, default 3600)
)";
constexpr std::string_view kKeysUsage = R"(usage: deskbox keys ls
       deskbox keys create NAME
       deskbox keys rm KEY_ID
Lists API keys, creates one (its secret is printed only once), or revokes one. The last
remaining key cannot be revoked.
)";
constexpr std::string_view kTemplatesUsage = R"(usage: deskbox templates
Lists the templates sandboxes can be created from.
)";

constexpr std::string_view kShortUsage =
    "usage: deskbox [--url URL] [--key KEY | --key-file FILE] [--json] COMMAND [ARGS]\n"
    "Run `deskbox --help` for the commands.\n";

struct CommandInfo {
  std::string_view name;
  std::string_view usage;
};
constexpr CommandInfo kCommands[] = {
    {"create", kCreateUsage},       {"ls", kListUsage},       {"show", kShowUsage},
    {"rm", kRemoveUsage},           {"pause", kPauseUsage},   {"resume", kResumeUsage},
    {"exec", kExecUsage},           {"cp", kCopyUsage},       {"screenshot", kScreenshotUsage},
    {"token", kTokenUsage},         {"events", kEventsUsage}, {"egress", kEgressUsage},
    {"recording", kRecordingUsage}, {"replay", kReplayUsage}, {"keys", kKeysUsage},
    {"templates", kTemplatesUsage},
};

const CommandInfo* FindCommand(std::string_view name) {
  for (const auto& c : kCommands)
    if (c.name == name) return &c;
  return nullptr;
}

// One option a command accepts. `apply` gets the value ("" for flags) and returns an error
// message, or nothing when the value is fine.
struct Option {
  std::string_view name;        // "--template"
  std::string_view short_name;  // "-o", or empty
  bool takes_value = false;
  std::function<std::optional<std::string>(std::string_view)> apply;
};

struct Scanned {
  std::vector<std::string> positionals;
  bool help = false;
};

// Walks args: options (as "--name VALUE", "--name=VALUE" or "-o VALUE") may appear between
// positionals. After `max_positionals` positionals, or after "--", everything left is taken as
// positional verbatim (exec's ARGV). "-" alone is a positional.
std::expected<Scanned, std::string> Scan(std::span<const std::string> args,
                                         std::span<const Option> options,
                                         size_t max_positionals = SIZE_MAX) {
  Scanned out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (out.positionals.size() >= max_positionals || arg == "--") {
      size_t from = arg == "--" && out.positionals.size() < max_positionals ? i + 1 : i;
      out.positionals.insert(out.positionals.end(), args.begin() + from, args.end());
      break;
    }
    if (arg == "-h" || arg == "--help") {
      out.help = true;
      continue;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      out.positionals.push_back(arg);
      continue;
    }
    std::string_view name = arg;
    std::optional<std::string_view> inline_value;
    if (name.starts_with("--")) {
      if (auto eq = name.find('='); eq != std::string_view::npos) {
        inline_value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
    }
    const Option* option = nullptr;
    for (const auto& o : options)
      if (o.name == name || (!o.short_name.empty() && o.short_name == name)) option = &o;
    if (!option) return std::unexpected(fmt::format("unknown option {}", name));
    std::string_view value;
    if (option->takes_value) {
      if (inline_value) {
        value = *inline_value;
      } else {
        if (i + 1 >= args.size()) return std::unexpected(fmt::format("{} needs a value", name));
        value = args[++i];
      }
    } else if (inline_value) {
      return std::unexpected(fmt::format("{} takes no value", name));
    }
    if (auto err = option->apply(value)) return std::unexpected(fmt::format("{}: {}", name, *err));
  }
  return out;
}

std::expected<uint64_t, std::string> ParseCount(std::string_view text, bool allow_zero) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    return std::unexpected(fmt::format("\"{}\" is not a whole number", text));
  if (!allow_zero && value == 0) return std::unexpected(std::string("must be at least 1"));
  return value;
}

// Sets `out` from a positive number; for Option::apply.
auto SetCount(std::optional<uint64_t>& out) {
  return [&out](std::string_view v) -> std::optional<std::string> {
    auto n = ParseCount(v, false);
    if (!n) return n.error();
    out = *n;
    return std::nullopt;
  };
}

auto SetString(std::optional<std::string>& out) {
  return [&out](std::string_view v) -> std::optional<std::string> {
    out = std::string(v);
    return std::nullopt;
  };
}

auto SetOneOf(std::string& out, std::initializer_list<std::string_view> allowed) {
  std::vector<std::string_view> choices(allowed);
  return [&out, choices](std::string_view v) -> std::optional<std::string> {
    for (auto c : choices)
      if (c == v) {
        out = std::string(v);
        return std::nullopt;
      }
    return fmt::format("\"{}\" is not one of {}", v, fmt::join(choices, ", "));
  };
}

// "K=V" into a map; K must be non-empty. Repeating a key keeps the last value.
auto AddPair(std::map<std::string, std::string>& out) {
  return [&out](std::string_view v) -> std::optional<std::string> {
    auto eq = v.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return fmt::format("expected KEY=VALUE, got \"{}\"", v);
    out[std::string(v.substr(0, eq))] = std::string(v.substr(eq + 1));
    return std::nullopt;
  };
}

// Appends each value, in the order given; for repeatable options whose order matters.
auto Append(std::vector<std::string>& out) {
  return [&out](std::string_view v) -> std::optional<std::string> {
    out.emplace_back(v);
    return std::nullopt;
  };
}

// The egress policy options of create (`default_flag` --egress-default) and egress set
// (--default). The default's value lands in `default_action` (empty when not given) for the
// caller to copy into `policy`, as SetOneOf fills a std::string.
std::vector<Option> EgressOptions(std::string_view default_flag, std::string& default_action,
                                  EgressPolicyArgs& policy) {
  return {
      {default_flag, "", true, SetOneOf(default_action, {"deny", "allow"})},
      {"--allow", "", true, Append(policy.allow)},
      {"--deny", "", true, Append(policy.deny)},
  };
}

// Global options as given on the command line, resolved against the environment at the end.
struct RawGlobals {
  std::optional<std::string> url, key, key_file;
  bool json = false;
};

std::vector<Option> GlobalOptionList(RawGlobals& g) {
  return {
      {"--url", "", true, SetString(g.url)},
      {"--key", "", true, SetString(g.key)},
      {"--token", "", true, SetString(g.key)},
      {"--key-file", "", true, SetString(g.key_file)},
      {"--json", "", false,
       [&g](std::string_view) -> std::optional<std::string> {
         g.json = true;
         return std::nullopt;
       }},
  };
}

std::vector<Option> WithGlobals(RawGlobals& g, std::vector<Option> options) {
  for (auto& o : GlobalOptionList(g)) options.push_back(std::move(o));
  return options;
}

ParseFailure Usage(std::string message, std::string_view usage) {
  return {ParseFailure::Kind::kUsage, std::move(message), std::string(usage)};
}
ParseFailure Help(std::string_view usage) {
  return {ParseFailure::Kind::kHelp, {}, std::string(usage)};
}

// JSON strings carry text: arguments that go into a request body must be UTF-8 (overlongs,
// surrogates and code points past U+10FFFF refused, as JSON parsers do).
bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char c = byte(i);
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      if ((byte(i + k) & 0xc0) != 0x80) return false;
      cp = cp << 6 | (byte(i + k) & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += len;
  }
  return true;
}

bool RulesAreText(const EgressPolicyArgs& policy) {
  for (const auto* rules : {&policy.allow, &policy.deny})
    for (const auto& rule : *rules)
      if (!IsValidUtf8(rule)) return false;
  return true;
}

std::expected<Resolution, std::string> ParseResolution(std::string_view text) {
  auto x = text.find('x');
  if (x == std::string_view::npos) return std::unexpected(std::string("expected WIDTHxHEIGHT"));
  auto w = ParseCount(text.substr(0, x), false);
  auto h = ParseCount(text.substr(x + 1), false);
  if (!w || !h || *w > 65535 || *h > 65535)
    return std::unexpected(fmt::format("\"{}\" is not WIDTHxHEIGHT", text));
  return Resolution{static_cast<uint32_t>(*w), static_cast<uint32_t>(*h)};
}

// Parses one command's arguments (everything after the command name).
class CommandParser {
 public:
  CommandParser(std::string_view name, std::string_view usage, RawGlobals& globals)
      : name_(name), usage_(usage), globals_(globals) {}

  std::expected<Command, ParseFailure> Parse(std::span<const std::string> args) {
    if (name_ == "create") return ParseCreate(args);
    if (name_ == "ls") return ParseList(args);
    if (name_ == "show") return OneId<ShowCommand>(args, &ShowCommand::id, "ID");
    if (name_ == "rm") return ParseRemove(args);
    if (name_ == "pause") return OneId<PauseCommand>(args, &PauseCommand::id, "ID");
    if (name_ == "resume") return OneId<ResumeCommand>(args, &ResumeCommand::id, "ID");
    if (name_ == "exec") return ParseExec(args);
    if (name_ == "cp") return ParseCopy(args);
    if (name_ == "screenshot") return ParseScreenshot(args);
    if (name_ == "token") return ParseToken(args);
    if (name_ == "events") return ParseEvents(args);
    if (name_ == "egress") return ParseEgress(args);
    if (name_ == "recording") return ParseRecording(args);
    if (name_ == "replay") return ParseReplay(args);
    if (name_ == "keys") return ParseKeys(args);
    if (name_ == "templates") {
      auto s = ScanOrFail(args, {});
      if (!s) return std::unexpected(s.error());
      if (!s->empty()) return std::unexpected(Usage("templates takes no arguments", usage_));
      return TemplatesCommand{};
    }
    return std::unexpected(Usage(fmt::format("unknown command \"{}\"", name_), kGlobalUsage));
  }

 private:
  // Scans with the command's options plus the global ones; help and errors become failures.
  std::expected<std::vector<std::string>, ParseFailure> ScanOrFail(
      std::span<const std::string> args, std::vector<Option> options,
      size_t max_positionals = SIZE_MAX) {
    auto all = WithGlobals(globals_, std::move(options));
    auto scanned = Scan(args, all, max_positionals);
    if (!scanned) return std::unexpected(Usage(scanned.error(), usage_));
    if (scanned->help) return std::unexpected(Help(usage_));
    return std::move(scanned->positionals);
  }

  std::optional<ParseFailure> Count(const std::vector<std::string>& positionals, size_t n,
                                    std::string_view what) {
    if (positionals.size() < n) return Usage(fmt::format("{}: missing {}", name_, what), usage_);
    if (positionals.size() > n)
      return Usage(fmt::format("{}: unexpected argument \"{}\"", name_, positionals[n]), usage_);
    for (const auto& p : positionals)
      if (p.empty()) return Usage(fmt::format("{}: empty {}", name_, what), usage_);
    return std::nullopt;
  }

  template <typename C>
  std::expected<Command, ParseFailure> OneId(std::span<const std::string> args,
                                             std::string C::*field, std::string_view what) {
    auto pos = ScanOrFail(args, {});
    if (!pos) return std::unexpected(pos.error());
    if (auto f = Count(*pos, 1, what)) return std::unexpected(*f);
    C c;
    c.*field = (*pos)[0];
    return c;
  }

  std::expected<Command, ParseFailure> ParseCreate(std::span<const std::string> args) {
    CreateCommand c;
    std::string on_timeout;
    std::string egress_default;
    std::optional<std::string> resolution_error;
    std::vector<Option> options = {
        {"--template", "", true, SetString(c.template_name)},
        {"--resolution", "", true,
         [&c](std::string_view v) -> std::optional<std::string> {
           auto r = ParseResolution(v);
           if (!r) return r.error();
           c.resolution = *r;
           return std::nullopt;
         }},
        {"--timeout", "", true, SetCount(c.timeout_s)},
        {"--on-timeout", "", true, SetOneOf(on_timeout, {"pause", "stop"})},
        {"--meta", "", true, AddPair(c.metadata)},
        {"--cpu-weight", "", true, SetCount(c.cpu_weight)},
        {"--exec-pids-max", "", true, SetCount(c.exec_pids_max)},
        {"--exec-memory-mib", "", true, SetCount(c.exec_memory_mib)},
        {"--exec-disk-mib", "", true, SetCount(c.exec_disk_mib)},
        {"--cpu-max", "", true,
         [&c](std::string_view v) -> std::optional<std::string> {
           double x = 0;
           auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
           if (ec != std::errc() || end != v.data() + v.size() || !(x > 0))
             return fmt::format("--cpu-max wants a number of CPUs above 0, e.g. 0.5 (got '{}')", v);
           c.cpu_max = x;
           return std::nullopt;
         }},
    };
    for (auto& o : EgressOptions("--egress-default", egress_default, c.egress))
      options.push_back(std::move(o));
    auto pos = ScanOrFail(args, std::move(options));
    if (!pos) return std::unexpected(pos.error());
    if (auto f = Count(*pos, 0, "")) return std::unexpected(*f);
    if (!on_timeout.empty()) c.on_timeout = on_timeout;
    if (!egress_default.empty()) c.egress.default_action = egress_default;
    bool text = !c.template_name || IsValidUtf8(*c.template_name);
    for (const auto& [k, v] : c.metadata) text = text && IsValidUtf8(k) && IsValidUtf8(v);
    if (!text) return std::unexpected(Usage("create: --template and --meta must be UTF-8", usage_));
    if (!RulesAreText(c.egress))
      return std::unexpected(Usage("create: --allow and --deny rules must be UTF-8", usage_));
    return c;
  }

  std::expected<Command, ParseFailure> ParseList(std::span<const std::string> args) {
    ListCommand c;
    auto pos = ScanOrFail(args, {{"--state", "", true, SetString(c.state)}});
    if (!pos) return std::unexpected(pos.error());
    if (auto f = Count(*pos, 0, "")) return std::unexpected(*f);
    return c;
  }

  std::expected<Command, ParseFailure> ParseRemove(std::span<const std::string> args) {
    auto pos = ScanOrFail(args, {});
    if (!pos) return std::unexpected(pos.error());
    if (pos->empty()) return std::unexpected(Usage("rm: missing ID", usage_));
    for (const auto& id : *pos)
      if (id.empty()) return std::unexpected(Usage("rm: empty ID", usage_));
    return RemoveCommand{std::move(*pos)};
  }

  std::expected<Command, ParseFailure> ParseExec(std::span<const std::string> args) {
    ExecCommand c;
    auto pos = ScanOrFail(args,
                          {
                              {"--cwd", "", true, SetString(c.cwd)},
                              {"--env", "-e", true, AddPair(c.env)},
                              {"--timeout", "", true, SetCount(c.timeout_s)},
                              {"--max-output", "", true, SetCount(c.max_output_bytes)},
                              {"--stdin", "-i", false,
                               [&c](std::string_view) -> std::optional<std::string> {
                                 c.forward_stdin = true;
                                 return std::nullopt;
                               }},
                              {"--shell", "", true, SetString(c.shell)},
                          },
                          2);
    if (!pos) return std::unexpected(pos.error());
    if (pos->empty() || (*pos)[0].empty())
      return std::unexpected(Usage("exec: missing ID", usage_));
    c.id = (*pos)[0];
    c.argv.assign(pos->begin() + 1, pos->end());
    if (c.shell && !c.argv.empty())
      return std::unexpected(Usage("exec: give either ARGV or --shell, not both", usage_));
    if (!c.shell && c.argv.empty())
      return std::unexpected(Usage("exec: missing the command (ARGV or --shell)", usage_));
    if (c.cwd && !c.cwd->starts_with('/'))
      return std::unexpected(Usage("exec: --cwd must be an absolute path", usage_));
    bool text = (!c.shell || IsValidUtf8(*c.shell)) && (!c.cwd || IsValidUtf8(*c.cwd));
    for (const auto& a : c.argv) text = text && IsValidUtf8(a);
    for (const auto& [k, v] : c.env) text = text && IsValidUtf8(k) && IsValidUtf8(v);
    if (!text)
      return std::unexpected(
          Usage("exec: the command, --cwd and --env must be UTF-8 (the API carries text); "
                "pass other bytes through --stdin",
                usage_));
    return c;
  }

  std::expected<Command, ParseFailure> ParseCopy(std::span<const std::string> args) {
    CopyCommand c;
    std::optional<std::string> mode;
    auto pos = ScanOrFail(args, {
                                    {"--mode", "", true, SetString(mode)},
                                    {"--parents", "-p", false,
                                     [&c](std::string_view) -> std::optional<std::string> {
                                       c.parents = true;
                                       return std::nullopt;
                                     }},
                                });
    if (!pos) return std::unexpected(pos.error());
    if (auto f = Count(*pos, 2, "SOURCE and DESTINATION")) return std::unexpected(*f);
    auto from = ParseRemoteSpec((*pos)[0]);
    auto to = ParseRemoteSpec((*pos)[1]);
    if (from && to)
      return std::unexpected(Usage("cp: copying between sandboxes is not supported", usage_));
    if (!from && !to)
      return std::unexpected(
          Usage("cp: one side must be a sandbox path, ID:/PATH (write ./NAME for a local file "
                "whose name has a ':')",
                usage_));
    const RemoteSpec& remote = from ? *from : *to;
    if (!remote.path.starts_with('/'))
      return std::unexpected(
          Usage(fmt::format("cp: the sandbox path \"{}\" must be absolute", remote.path), usage_));
    c.direction = to ? CopyCommand::Direction::kUpload : CopyCommand::Direction::kDownload;
    c.local = from ? (*pos)[1] : (*pos)[0];
    c.sandbox_id = remote.sandbox_id;
    c.remote_path = remote.path;
    if (mode) {
      bool octal = mode->size() >= 3 && mode->size() <= 4 &&
                   mode->find_first_not_of("01234567") == std::string::npos;
      if (!octal)
        return std::unexpected(
            Usage(fmt::format("cp: --mode \"{}\" is not an octal mode like 0644", *mode), usage_));
      c.mode = mode;
    }
    if (c.direction == CopyCommand::Direction::kDownload && (c.mode || c.parents))
      return std::unexpected(Usage("cp: --mode and --parents apply to uploads only", usage_));
    if (c.direction == CopyCommand::Direction::kUpload && c.local == "-" &&
        c.remote_path.ends_with('/'))
      return std::unexpected(
          Usage("cp: uploading stdin needs a file name, not a directory path", usage_));
    return c;
  }

  std::expected<Command, ParseFailure> ParseScreenshot(std::span<const std::string> args) {
    ScreenshotCommand c;
    std::optional<std::string> output;
    std::string format;
    auto pos = ScanOrFail(args, {
                                    {"--output", "-o", true, SetString(output)},
                                    {"--format", "", true, SetOneOf(format, {"png", "jpeg"})},
                                });
    if (!pos) return std::unexpected(pos.error());
    if (auto f = Count(*pos, 1, "ID")) return std::unexpected(*f);
    if (!output || output->empty())
      return std::unexpected(Usage("screenshot: -o FILE is required ('-' for stdout)", usage_));
    c.id = (*pos)[0];
    c.output = *output;
    if (format.empty()) {
      std::string lower = c.output;
      for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      format = lower.ends_with(".jpg") || lower.ends_with(".jpeg") ? "jpeg" : "png";
    }
    c.format = format;
    return c;
  }

  std::expected<Command, ParseFailure> ParseToken(std::span<const std::string> args) {
    std::string scope;
    std::optional<uint64_t> ttl;
    auto pos =
        ScanOrFail(args, {
                             {"--scope", "", true, SetOneOf(scope, {"view", "control", "cdp", "replay"})},
                             {"--ttl", "", true, SetCount(ttl)},
                         });
    if (!pos) return std::unexpected(pos.error());
    if (!pos->empty() && ((*pos)[0] == "ls" || (*pos)[0] == "rm")) {
      bool list = (*pos)[0] == "ls";
      if (!scope.empty() || ttl)
        return std::unexpected(
            Usage("token: --scope and --ttl apply to creating a token only", usage_));
      std::vector<std::string> rest(pos->begin() + 1, pos->end());
      if (auto f = Count(rest, 1, list ? "sandbox ID" : "TOKEN_ID")) return std::unexpected(*f);
      if (list) return TokenListCommand{rest[0]};
      return TokenRemoveCommand{rest[0]};
    }
    if (auto f = Count(*pos, 1, "sandbox ID")) return std::unexpected(*f);
    if (scope.empty())
      return std::unexpected(Usage("token: --scope view|control|cdp is required", usage_));
    return TokenCreateCommand{(*pos)[0], scope, ttl};
  }

  std::expected<Command, ParseFailure> ParseEvents(std::span<const std::string> args) {
    EventsCommand c;
    auto pos = ScanOrFail(args, {
                                    {"--since", "", true,
                                     [&c](std::string_view v) -> std::optional<std::string> {
                                       auto n = ParseCount(v, true);
                                       if (!n) return n.error();
                                       c.since = *n;
                                       return std::nullopt;
                                     }},
                                    {"--follow", "-f", false,
                                     [&c](std::string_view) -> std::optional<std::string> {
                                       c.follow = true;
                                       return std::nullopt;
                                     }},
                                });
    if (!pos) return std::unexpected(pos.error());
    if (auto f = Count(*pos, 1, "ID")) return std::unexpected(*f);
    c.id = (*pos)[0];
    return c;
  }

  // `egress ID` reads the policy, `egress ID set [OPTIONS]` replaces it.
  std::expected<Command, ParseFailure> ParseEgress(std::span<const std::string> args) {
    EgressPolicyArgs policy;
    std::string default_action;
    auto pos = ScanOrFail(args, EgressOptions("--default", default_action, policy));
    if (!pos) return std::unexpected(pos.error());
    if (pos->empty() || (pos->size() == 1 && (*pos)[0] == "set"))
      return std::unexpected(Usage("egress: missing ID", usage_));
    if ((*pos)[0] == "set")
      return std::unexpected(
          Usage("egress: the ID comes before set: deskbox egress ID set [OPTIONS]", usage_));
    if (pos->size() == 1) {
      if (auto f = Count(*pos, 1, "ID")) return std::unexpected(*f);
      if (!default_action.empty() || policy.given())
        return std::unexpected(
            Usage("egress: --default, --allow and --deny change the policy: deskbox egress ID "
                  "set [OPTIONS]",
                  usage_));
      return EgressShowCommand{(*pos)[0]};
    }
    if ((*pos)[1] != "set")
      return std::unexpected(Usage(
          fmt::format("egress: unknown subcommand \"{}\" (expected set)", (*pos)[1]), usage_));
    if (auto f = Count(*pos, 2, "ID")) return std::unexpected(*f);
    if (!default_action.empty()) policy.default_action = default_action;
    if (!RulesAreText(policy))
      return std::unexpected(Usage("egress: --allow and --deny rules must be UTF-8", usage_));
    return EgressSetCommand{(*pos)[0], std::move(policy)};
  }

  // `recording SUBCOMMAND ID`, like keys and token ls: the subcommand comes first.
  std::expected<Command, ParseFailure> ParseRecording(std::span<const std::string> args) {
    std::optional<std::string> output;
    std::optional<uint32_t> segment;
    auto pos = ScanOrFail(args, {
                                    {"--output", "-o", true, SetString(output)},
                                    {"--segment", "", true,
                                     [&segment](std::string_view v) -> std::optional<std::string> {
                                       auto n = ParseCount(v, true);
                                       if (!n) return n.error();
                                       if (*n > kMaxSegmentIndex)
                                         return fmt::format("{} is not a segment index (0..{})", v,
                                                            kMaxSegmentIndex);
                                       segment = static_cast<uint32_t>(*n);
                                       return std::nullopt;
                                     }},
                                });
    if (!pos) return std::unexpected(pos.error());
    auto is_subcommand = [](std::string_view word) {
      return word == "ls" || word == "get" || word == "verify" || word == "rm";
    };
    if (pos->empty())
      return std::unexpected(Usage("recording: missing ls, get, verify or rm", usage_));
    std::string_view sub = (*pos)[0];
    if (!is_subcommand(sub)) {
      if (pos->size() > 1 && is_subcommand((*pos)[1]))
        return std::unexpected(
            Usage(fmt::format("recording: the subcommand comes first: deskbox recording {} ID",
                              (*pos)[1]),
                  usage_));
      return std::unexpected(Usage(
          fmt::format("recording: unknown subcommand \"{}\" (expected ls, get, verify or rm)", sub),
          usage_));
    }
    std::vector<std::string> rest(pos->begin() + 1, pos->end());
    if (auto f = Count(rest, 1, "ID")) return std::unexpected(*f);
    const std::string& id = rest[0];
    if (sub != "get" && (output || segment))
      return std::unexpected(Usage("recording: -o and --segment apply to get only", usage_));
    if (sub == "ls") return RecordingShowCommand{id};
    if (sub == "verify") return RecordingVerifyCommand{id};
    if (sub == "rm") return RecordingRemoveCommand{id};
    RecordingGetCommand c{id, segment, {}};
    if (output) {
      if (output->empty())
        return std::unexpected(Usage("recording: -o needs a file name ('-' for stdout)", usage_));
      c.output = *output;
    } else {
      // The default file is named after the ID, so the ID must not lead somewhere else.
      if (id.find('/') != std::string::npos)
        return std::unexpected(
            Usage(fmt::format("recording: \"{}\" cannot name a file; give -o FILE", id), usage_));
      c.output = segment ? fmt::format("{}-{:06}.mp4", id, *segment) : id + ".mp4";
    }
    return c;
  }

  std::expected<Command, ParseFailure> ParseReplay(std::span<const std::string> args) {
    ReplayCommand c;
    auto pos = ScanOrFail(args, {{"--ttl", "", true, SetCount(c.ttl_s)}});
    if (!pos) return std::unexpected(pos.error());
    if (auto f = Count(*pos, 1, "ID")) return std::unexpected(*f);
    c.id = (*pos)[0];
    return c;
  }

  std::expected<Command, ParseFailure> ParseKeys(std::span<const std::string> args) {
    auto pos = ScanOrFail(args, {});
    if (!pos) return std::unexpected(pos.error());
    if (pos->empty()) return std::unexpected(Usage("keys: missing ls, create or rm", usage_));
    std::string_view sub = (*pos)[0];
    std::vector<std::string> rest(pos->begin() + 1, pos->end());
    if (sub == "ls") {
      if (auto f = Count(rest, 0, "")) return std::unexpected(*f);
      return KeyListCommand{};
    }
    if (sub == "create") {
      if (auto f = Count(rest, 1, "NAME")) return std::unexpected(*f);
      if (!IsValidUtf8(rest[0])) return std::unexpected(Usage("keys: NAME must be UTF-8", usage_));
      return KeyCreateCommand{rest[0]};
    }
    if (sub == "rm") {
      if (auto f = Count(rest, 1, "KEY_ID")) return std::unexpected(*f);
      return KeyRemoveCommand{rest[0]};
    }
    return std::unexpected(Usage(fmt::format("keys: unknown subcommand \"{}\"", sub), usage_));
  }

  std::string_view name_;
  std::string_view usage_;
  RawGlobals& globals_;
};

std::optional<std::string> NonEmpty(const EnvLookup& env, std::string_view name) {
  auto v = env(name);
  if (v && v->empty()) return std::nullopt;
  return v;
}

}  // namespace

std::string MainUsage() {
  return std::string(kGlobalUsage);
}

std::optional<RemoteSpec> ParseRemoteSpec(std::string_view arg) {
  auto colon = arg.find(':');
  if (colon == std::string_view::npos || colon == 0) return std::nullopt;
  if (arg.substr(0, colon).find('/') != std::string_view::npos) return std::nullopt;
  return RemoteSpec{std::string(arg.substr(0, colon)), std::string(arg.substr(colon + 1))};
}

std::expected<Invocation, ParseFailure> ParseArgs(std::span<const std::string> args,
                                                  const EnvLookup& env) {
  RawGlobals raw;
  auto globals = GlobalOptionList(raw);
  auto scanned = Scan(args, globals, 1);
  if (!scanned) return std::unexpected(Usage(scanned.error(), kGlobalUsage));
  if (scanned->positionals.empty()) {
    if (scanned->help) return std::unexpected(Help(kGlobalUsage));
    return std::unexpected(Usage("missing command", kGlobalUsage));
  }
  std::string name = scanned->positionals[0];
  std::span<const std::string> rest(scanned->positionals.begin() + 1, scanned->positionals.end());
  if (name == "help") {
    if (rest.empty()) return std::unexpected(Help(kGlobalUsage));
    const CommandInfo* info = FindCommand(rest[0]);
    if (!info)
      return std::unexpected(Usage(fmt::format("unknown command \"{}\"", rest[0]), kGlobalUsage));
    return std::unexpected(Help(info->usage));
  }
  const CommandInfo* info = FindCommand(name);
  if (!info)
    return std::unexpected(Usage(fmt::format("unknown command \"{}\"", name), kGlobalUsage));
  if (scanned->help) return std::unexpected(Help(info->usage));

  CommandParser parser(info->name, info->usage, raw);
  auto command = parser.Parse(rest);
  if (!command) return std::unexpected(command.error());

  Invocation inv{.global = {}, .command = std::move(*command)};
  std::string url_text =
      raw.url ? *raw.url : NonEmpty(env, "DESKBOX_URL").value_or(std::string(kDefaultUrl));
  auto url = ParseServerUrl(url_text);
  if (!url) return std::unexpected(Usage(url.error(), kShortUsage));
  inv.global.url = std::move(*url);
  inv.global.json = raw.json;

  if (raw.key && raw.key_file)
    return std::unexpected(Usage("give --key or --key-file, not both", kShortUsage));
  if (raw.key) {
    if (raw.key->empty()) return std::unexpected(Usage("--key is empty", kShortUsage));
    inv.global.credential = raw.key;
    inv.global.credential_source = "--key";
  } else if (raw.key_file) {
    inv.global.credential_file = raw.key_file;
    inv.global.credential_source = "--key-file";
  } else {
    for (std::string_view name : {"DESKBOX_KEY", "DESKBOX_API_KEY", "DESKBOX_TOKEN"}) {
      if (auto k = NonEmpty(env, name)) {
        inv.global.credential = k;
        inv.global.credential_source = std::string(name);
        break;
      }
    }
    if (!inv.global.credential) {
      if (auto f = NonEmpty(env, "DESKBOX_KEY_FILE")) {
        inv.global.credential_file = f;
        inv.global.credential_source = "DESKBOX_KEY_FILE";
      }
    }
  }
  return inv;
}

}  // namespace deskbox::cli
