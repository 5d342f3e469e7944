// deskbox CLI: argument parsing, URL parsing, request building and output formatting
// (deskbox_cli_lib; no network).
#include <gtest/gtest.h>

#include <map>

#include "cli/args.h"
#include "cli/output.h"
#include "cli/requests.h"
#include "cli/server_url.h"

namespace deskbox::cli {
namespace {

using boost::beast::http::verb;

struct Env {
  std::map<std::string, std::string> vars;
  EnvLookup Lookup() const {
    return [this](std::string_view name) -> std::optional<std::string> {
      auto it = vars.find(std::string(name));
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

std::expected<Invocation, ParseFailure> Parse(std::vector<std::string> args, const Env& env = {}) {
  return ParseArgs(args, env.Lookup());
}

template <typename C>
C ParseAs(std::vector<std::string> args, const Env& env = {}) {
  auto inv = Parse(std::move(args), env);
  EXPECT_TRUE(inv) << (inv ? "" : inv.error().message);
  if (!inv) return {};
  EXPECT_TRUE(std::holds_alternative<C>(inv->command));
  if (!std::holds_alternative<C>(inv->command)) return {};
  return std::get<C>(inv->command);
}

// The usage error's message, or "" when parsing did not fail with a usage error.
std::string UsageError(std::vector<std::string> args, const Env& env = {}) {
  auto inv = Parse(std::move(args), env);
  if (inv || inv.error().kind != ParseFailure::Kind::kUsage) return "";
  EXPECT_FALSE(inv.error().usage.empty());
  return inv.error().message;
}

// ---- URLs ----

TEST(ServerUrl, HostPortAndPrefix) {
  auto u = ParseServerUrl("http://deskbox.example:9000/api/");
  ASSERT_TRUE(u) << u.error();
  EXPECT_EQ(u->host, "deskbox.example");
  EXPECT_EQ(u->port, "9000");
  EXPECT_EQ(u->prefix, "/api");
  EXPECT_EQ(u->HostHeader(), "deskbox.example:9000");
  EXPECT_EQ(u->ToString(), "http://deskbox.example:9000/api");
}

TEST(ServerUrl, DefaultsAndShortForms) {
  auto u = ParseServerUrl("http://127.0.0.1");
  ASSERT_TRUE(u);
  EXPECT_EQ(u->port, "80");
  EXPECT_EQ(u->prefix, "");
  auto bare = ParseServerUrl("localhost:8080");
  ASSERT_TRUE(bare);
  EXPECT_EQ(bare->host, "localhost");
  EXPECT_EQ(bare->port, "8080");
  auto upper = ParseServerUrl("HTTP://h:1/");
  ASSERT_TRUE(upper);
  EXPECT_EQ(upper->prefix, "");
}

TEST(ServerUrl, Ipv6) {
  auto u = ParseServerUrl("http://[::1]:8080/x");
  ASSERT_TRUE(u) << u.error();
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->HostHeader(), "[::1]:8080");
  EXPECT_EQ(u->ToString(), "http://[::1]:8080/x");
  EXPECT_FALSE(ParseServerUrl("http://[::1"));
  EXPECT_FALSE(ParseServerUrl("http://[::1]x"));
}

TEST(ServerUrl, HttpsIsRefusedClearly) {
  auto u = ParseServerUrl("https://deskbox.example");
  ASSERT_FALSE(u);
  EXPECT_NE(u.error().find("https is not supported"), std::string::npos) << u.error();
}

TEST(ServerUrl, RejectsWhatItCannotUse) {
  for (const char* bad :
       {"ftp://h", "http://", "http://:80", "http://h:", "http://h:0", "http://h:65536",
        "http://h:8o", "http://user:pw@h", "http://h/?x=1", "http://h/#f", "http://h /x", ""}) {
    EXPECT_FALSE(ParseServerUrl(bad)) << bad;
  }
}

TEST(ServerUrl, UserInfoIsNotEchoed) {
  auto u = ParseServerUrl("http://me:secret@h");
  ASSERT_FALSE(u);
  // The message quotes the URL the user typed; what matters is that it says why.
  EXPECT_NE(u.error().find("user info"), std::string::npos);
}

TEST(PercentEncode, ReservedAndUnreserved) {
  EXPECT_EQ(PercentEncode("sb-0123abcd_~."), "sb-0123abcd_~.");
  EXPECT_EQ(PercentEncode("a/b c&d=e?#%"), "a%2Fb%20c%26d%3De%3F%23%25");
  EXPECT_EQ(PercentEncode("/tmp/a b+c", true), "/tmp/a%20b%2Bc");
  EXPECT_EQ(PercentEncode("\xff\x01"), "%FF%01");
}

// ---- Global options and the environment ----

TEST(Globals, DefaultsFromNothing) {
  auto inv = Parse({"ls"});
  ASSERT_TRUE(inv);
  EXPECT_EQ(inv->global.url.ToString(), "http://127.0.0.1:8080");
  EXPECT_FALSE(inv->global.credential);
  EXPECT_FALSE(inv->global.json);
}

TEST(Globals, EnvironmentThenFlags) {
  Env env{{{"DESKBOX_URL", "http://10.0.0.1:1234"}, {"DESKBOX_API_KEY", "dbk_env"}}};
  auto inv = Parse({"ls"}, env);
  ASSERT_TRUE(inv);
  EXPECT_EQ(inv->global.url.host, "10.0.0.1");
  EXPECT_EQ(inv->global.credential, "dbk_env");
  EXPECT_EQ(inv->global.credential_source, "DESKBOX_API_KEY");

  auto flags = Parse({"--url", "http://h:1", "--key=dbk_flag", "ls"}, env);
  ASSERT_TRUE(flags);
  EXPECT_EQ(flags->global.url.host, "h");
  EXPECT_EQ(flags->global.credential, "dbk_flag");
  EXPECT_EQ(flags->global.credential_source, "--key");
}

TEST(Globals, KeyVariablesInOrder) {
  Env env{{{"DESKBOX_KEY", "dbk_a"}, {"DESKBOX_API_KEY", "dbk_b"}, {"DESKBOX_TOKEN", "dbt_c"}}};
  EXPECT_EQ(Parse({"ls"}, env)->global.credential, "dbk_a");
  env.vars["DESKBOX_KEY"] = "";  // empty counts as unset
  EXPECT_EQ(Parse({"ls"}, env)->global.credential, "dbk_b");
  env.vars.erase("DESKBOX_API_KEY");
  EXPECT_EQ(Parse({"ls"}, env)->global.credential, "dbt_c");
  env.vars.erase("DESKBOX_TOKEN");
  env.vars["DESKBOX_KEY_FILE"] = "/run/key";
  auto inv = Parse({"ls"}, env);
  EXPECT_FALSE(inv->global.credential);
  EXPECT_EQ(inv->global.credential_file, "/run/key");
}

TEST(Globals, TokenFlagIsTheSameHeader) {
  auto inv = Parse({"--token", "dbt_x", "show", "sb-1"});
  ASSERT_TRUE(inv);
  EXPECT_EQ(inv->global.credential, "dbt_x");
}

TEST(Globals, AcceptedAmongCommandOptions) {
  auto inv = Parse({"ls", "--json", "--state", "paused", "--url=http://h:2"});
  ASSERT_TRUE(inv);
  EXPECT_TRUE(inv->global.json);
  EXPECT_EQ(inv->global.url.port, "2");
  EXPECT_EQ(std::get<ListCommand>(inv->command).state, "paused");
}

TEST(Globals, Conflicts) {
  EXPECT_NE(UsageError({"--key", "k", "--key-file", "f", "ls"}), "");
  EXPECT_NE(UsageError({"--key=", "ls"}), "");
  EXPECT_NE(UsageError({"--url", "https://h", "ls"}), "");
  EXPECT_NE(UsageError({"ls"}, Env{{{"DESKBOX_URL", "ftp://x"}}}), "");
  EXPECT_NE(UsageError({"--json=1", "ls"}), "");
  EXPECT_NE(UsageError({"--url"}), "");
}

TEST(Globals, KeyValueNeverInMessages) {
  auto inv = Parse({"--key", "dbk_SECRET", "bogus"});
  ASSERT_FALSE(inv);
  EXPECT_EQ(inv.error().message.find("SECRET"), std::string::npos);
  EXPECT_EQ(inv.error().usage.find("SECRET"), std::string::npos);
}

// ---- Help and usage errors ----

TEST(Help, Forms) {
  for (std::vector<std::string> args :
       std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"help"}}) {
    auto inv = Parse(args);
    ASSERT_FALSE(inv);
    EXPECT_EQ(inv.error().kind, ParseFailure::Kind::kHelp);
    EXPECT_EQ(inv.error().usage, MainUsage());
  }
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"exec", "--help"}, {"help", "exec"}, {"--help", "exec"}, {"exec", "sb-1", "-h"}}) {
    auto inv = Parse(args);
    ASSERT_FALSE(inv);
    EXPECT_EQ(inv.error().kind, ParseFailure::Kind::kHelp);
    EXPECT_TRUE(inv.error().usage.starts_with("usage: deskbox exec")) << inv.error().usage;
  }
}

TEST(Help, EveryCommandHasUsage) {
  for (const char* name :
       {"create", "ls", "show", "rm", "pause", "resume", "exec", "cp", "screenshot", "token",
        "events", "egress", "recording", "replay", "keys", "templates"}) {
    auto inv = Parse({name, "--help"});
    ASSERT_FALSE(inv) << name;
    EXPECT_EQ(inv.error().kind, ParseFailure::Kind::kHelp) << name;
    EXPECT_TRUE(inv.error().usage.starts_with(std::string("usage: deskbox ") + name)) << name;
    EXPECT_NE(MainUsage().find(std::string("  ") + name), std::string::npos) << name;
  }
}

TEST(Usage, Errors) {
  EXPECT_EQ(UsageError({}), "missing command");
  EXPECT_NE(UsageError({"frobnicate"}).find("unknown command"), std::string::npos);
  EXPECT_NE(UsageError({"ls", "--bogus"}).find("unknown option --bogus"), std::string::npos);
  EXPECT_NE(UsageError({"ls", "extra"}).find("unexpected argument"), std::string::npos);
  EXPECT_NE(UsageError({"show"}).find("missing ID"), std::string::npos);
  EXPECT_NE(UsageError({"show", "a", "b"}), "");
  EXPECT_NE(UsageError({"show", ""}), "");
  EXPECT_NE(UsageError({"rm"}), "");
  EXPECT_NE(UsageError({"pause"}), "");
  EXPECT_NE(UsageError({"resume", "a", "b"}), "");
  EXPECT_NE(UsageError({"templates", "x"}), "");
  EXPECT_NE(UsageError({"ls", "--state"}).find("needs a value"), std::string::npos);
}

// ---- Commands ----

TEST(Create, AllOptions) {
  auto c = ParseAs<CreateCommand>({"create", "--template", "desktop", "--resolution", "1920x1080",
                                   "--timeout=600", "--on-timeout", "stop", "--meta", "owner=ana",
                                   "--meta", "ticket=a=b", "--meta", "empty="});
  EXPECT_EQ(c.template_name, "desktop");
  ASSERT_TRUE(c.resolution);
  EXPECT_EQ(c.resolution->width, 1920u);
  EXPECT_EQ(c.resolution->height, 1080u);
  EXPECT_EQ(c.timeout_s, 600u);
  EXPECT_EQ(c.on_timeout, "stop");
  EXPECT_EQ(c.metadata, (std::map<std::string, std::string>{
                            {"owner", "ana"}, {"ticket", "a=b"}, {"empty", ""}}));

  auto r = CreateRequest(c);
  EXPECT_EQ(r.method, verb::post);
  EXPECT_EQ(r.target, "/v1/sandboxes");
  ASSERT_TRUE(r.body);
  EXPECT_EQ(*r.body, nlohmann::json::parse(R"({"template":"desktop",
      "resolution":{"width":1920,"height":1080},"timeout_s":600,"on_timeout":"stop",
      "metadata":{"owner":"ana","ticket":"a=b","empty":""}})"));
}

TEST(Create, LimitsGoInOneObject) {
  auto r = CreateRequest(ParseAs<CreateCommand>({"create", "--cpu-weight", "50", "--cpu-max=0.5"}));
  ASSERT_TRUE(r.body);
  EXPECT_EQ(*r.body, nlohmann::json::parse(R"({"limits":{"cpu_weight":50,"cpu_max":0.5}})"));
  r = CreateRequest(ParseAs<CreateCommand>({"create", "--exec-pids-max", "256", "--exec-memory-mib=512", "--exec-disk-mib", "64"}));
  EXPECT_EQ(*r.body, nlohmann::json::parse(R"({"limits":{"exec_pids_max":256,"exec_memory_mib":512,"exec_disk_mib":64}})"));
  EXPECT_NE(UsageError({"create", "--exec-pids-max", "many"}), "");
  r = CreateRequest(ParseAs<CreateCommand>({"create", "--cpu-max", "1"}));
  EXPECT_EQ(*r.body, nlohmann::json::parse(R"({"limits":{"cpu_max":1.0}})"));
  for (const char* bad : {"0", "-1", "half", "0.5x", ""})
    EXPECT_NE(UsageError({"create", "--cpu-max", bad}).find("--cpu-max"), std::string::npos) << bad;
  EXPECT_NE(UsageError({"create", "--cpu-weight", "lots"}), "");
}

TEST(Create, NoOptionsSendsEmptyObject) {
  auto r = CreateRequest(ParseAs<CreateCommand>({"create"}));
  ASSERT_TRUE(r.body);
  EXPECT_EQ(r.body->dump(), "{}");
}

TEST(Create, BadValues) {
  EXPECT_NE(UsageError({"create", "--resolution", "1280"}), "");
  EXPECT_NE(UsageError({"create", "--resolution", "0x800"}), "");
  EXPECT_NE(UsageError({"create", "--resolution", "1280x"}), "");
  EXPECT_NE(UsageError({"create", "--resolution", "-1x5"}), "");
  EXPECT_NE(UsageError({"create", "--timeout", "0"}), "");
  EXPECT_NE(UsageError({"create", "--timeout", "10s"}), "");
  EXPECT_NE(UsageError({"create", "--timeout", "99999999999999999999999"}), "");
  EXPECT_NE(UsageError({"create", "--on-timeout", "destroy"}).find("not one of pause, stop"),
            std::string::npos);
  EXPECT_NE(UsageError({"create", "--meta", "novalue"}), "");
  EXPECT_NE(UsageError({"create", "--meta", "=v"}), "");
}

TEST(Create, EgressPolicyKeepsRuleOrder) {
  auto c = ParseAs<CreateCommand>({"create", "--egress-default", "deny", "--allow", "z.example",
                                   "--allow=*.example.com:443", "--deny", "ads.example.com",
                                   "--allow", "203.0.113.0/24", "--meta", "a=b"});
  EXPECT_EQ(c.egress.default_action, "deny");
  EXPECT_EQ(c.egress.allow,
            (std::vector<std::string>{"z.example", "*.example.com:443", "203.0.113.0/24"}));
  EXPECT_EQ(c.egress.deny, std::vector<std::string>{"ads.example.com"});
  auto r = CreateRequest(c);
  ASSERT_TRUE(r.body);
  EXPECT_EQ(r.body->at("egress").dump(),
            R"({"allow":["z.example","*.example.com:443","203.0.113.0/24"],)"
            R"("default":"deny","deny":["ads.example.com"]})");
  EXPECT_EQ(r.body->at("metadata"), nlohmann::json::parse(R"({"a":"b"})"));
}

TEST(Create, EgressOnlyTheFieldsGiven) {
  EXPECT_EQ(CreateRequest(ParseAs<CreateCommand>({"create", "--deny", "x.example"})).body->dump(),
            R"({"egress":{"deny":["x.example"]}})");
  EXPECT_EQ(
      CreateRequest(ParseAs<CreateCommand>({"create", "--egress-default=allow"})).body->dump(),
      R"({"egress":{"default":"allow"}})");
  // Rules are the daemon's to judge: odd ones go through as written.
  EXPECT_EQ(CreateRequest(ParseAs<CreateCommand>({"create", "--allow", "not a rule"}))
                .body->at("egress")
                .dump(),
            R"({"allow":["not a rule"]})");
  EXPECT_FALSE(CreateRequest(ParseAs<CreateCommand>({"create"})).body->contains("egress"));
}

TEST(Create, EgressBadValues) {
  EXPECT_NE(UsageError({"create", "--egress-default", "block"}).find("not one of deny, allow"),
            std::string::npos);
  EXPECT_NE(UsageError({"create", "--egress-default", ""}), "");
  EXPECT_NE(UsageError({"create", "--allow"}).find("--allow needs a value"), std::string::npos);
  EXPECT_NE(UsageError({"create", "--deny"}), "");
  // egress set's spelling is not create's.
  EXPECT_NE(UsageError({"create", "--default", "deny"}).find("unknown option --default"),
            std::string::npos);
  EXPECT_NE(UsageError({"create", "--allow", "\xff.example"}).find("UTF-8"), std::string::npos);
}

TEST(List, StateFilter) {
  EXPECT_EQ(ListRequest(ParseAs<ListCommand>({"ls"})).target, "/v1/sandboxes");
  EXPECT_EQ(ListRequest(ParseAs<ListCommand>({"ls", "--state", "stopped"})).target,
            "/v1/sandboxes?state=stopped");
  EXPECT_EQ(ListRequest(ParseAs<ListCommand>({"ls", "--state", "a&b"})).target,
            "/v1/sandboxes?state=a%26b");
}

TEST(Lifecycle, Requests) {
  auto show = ShowRequest(ParseAs<ShowCommand>({"show", "sb-1"}).id);
  EXPECT_EQ(show.method, verb::get);
  EXPECT_EQ(show.target, "/v1/sandboxes/sb-1");
  EXPECT_FALSE(show.body);
  auto rm = ParseAs<RemoveCommand>({"rm", "sb-1", "sb-2"});
  EXPECT_EQ(rm.ids, (std::vector<std::string>{"sb-1", "sb-2"}));
  EXPECT_EQ(RemoveRequest("sb-1").method, verb::delete_);
  auto pause = PauseRequest(ParseAs<PauseCommand>({"pause", "sb-1"}).id);
  EXPECT_EQ(pause.method, verb::post);
  EXPECT_EQ(pause.target, "/v1/sandboxes/sb-1/pause");
  EXPECT_EQ(ResumeRequest(ParseAs<ResumeCommand>({"resume", "sb-1"}).id).target,
            "/v1/sandboxes/sb-1/resume");
  // An id cannot escape its path segment.
  EXPECT_EQ(ShowRequest("../keys").target, "/v1/sandboxes/..%2Fkeys");
}

TEST(Exec, ArgvAfterDoubleDash) {
  auto c = ParseAs<ExecCommand>({"exec", "sb-1", "--cwd", "/tmp", "--env", "A=1", "-e", "B=x=y",
                                 "--timeout", "5", "--stdin", "--", "ls", "-la", "--json"});
  EXPECT_EQ(c.id, "sb-1");
  EXPECT_EQ(c.argv, (std::vector<std::string>{"ls", "-la", "--json"}));
  EXPECT_FALSE(c.shell);
  EXPECT_EQ(c.cwd, "/tmp");
  EXPECT_EQ(c.env, (std::map<std::string, std::string>{{"A", "1"}, {"B", "x=y"}}));
  EXPECT_EQ(c.timeout_s, 5u);
  EXPECT_TRUE(c.forward_stdin);

  auto r = ExecRequest(c, std::string("hi\n\0x", 5));
  EXPECT_EQ(r.method, verb::post);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/exec");
  ASSERT_TRUE(r.body);
  EXPECT_EQ(*r.body, nlohmann::json::parse(R"({"argv":["ls","-la","--json"],"cwd":"/tmp",
      "env":{"A":"1","B":"x=y"},"stdin_b64":"aGkKAHg=","timeout_s":5,"encoding":"base64"})"));
}

TEST(Exec, OptionsEndAtTheFirstWordOfArgv) {
  auto c = ParseAs<ExecCommand>({"exec", "sb-1", "ls", "--cwd", "/x", "--", "-y"});
  EXPECT_EQ(c.argv, (std::vector<std::string>{"ls", "--cwd", "/x", "--", "-y"}));
  EXPECT_FALSE(c.cwd);
  auto dash = ParseAs<ExecCommand>({"exec", "sb-1", "--", "--weird", "-h"});
  EXPECT_EQ(dash.argv, (std::vector<std::string>{"--weird", "-h"}));
  // Global options work before the id and before ARGV.
  auto inv = Parse({"exec", "--json", "sb-1", "--url", "http://h:3", "true"});
  ASSERT_TRUE(inv);
  EXPECT_TRUE(inv->global.json);
  EXPECT_EQ(inv->global.url.port, "3");
  EXPECT_EQ(std::get<ExecCommand>(inv->command).argv, std::vector<std::string>{"true"});
}

TEST(Exec, Shell) {
  auto c = ParseAs<ExecCommand>({"exec", "sb-1", "--shell", "echo $HOME | wc -c"});
  EXPECT_EQ(c.shell, "echo $HOME | wc -c");
  EXPECT_TRUE(c.argv.empty());
  auto r = ExecRequest(c, std::nullopt);
  EXPECT_EQ(*r.body,
            nlohmann::json::parse(R"({"shell":"echo $HOME | wc -c","encoding":"base64"})"));
}

TEST(Exec, BadForms) {
  EXPECT_NE(UsageError({"exec"}), "");
  EXPECT_NE(UsageError({"exec", "sb-1"}).find("missing the command"), std::string::npos);
  EXPECT_NE(UsageError({"exec", "sb-1", "--"}), "");
  EXPECT_NE(UsageError({"exec", "sb-1", "--shell", "x", "--", "ls"}).find("not both"),
            std::string::npos);
  EXPECT_NE(UsageError({"exec", "sb-1", "--cwd", "rel", "ls"}).find("absolute"), std::string::npos);
  EXPECT_NE(UsageError({"exec", "sb-1", "--env", "NOEQ", "ls"}), "");
  EXPECT_NE(UsageError({"exec", "sb-1", "--timeout", "x", "ls"}), "");
}

TEST(Exec, TextOnly) {
  ParseAs<ExecCommand>({"exec", "sb-1", "echo", "h\xc3\xa9 \xf0\x9f\x99\x82"});
  for (const char* bad :
       {"\xff", "\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "a\x80"}) {
    EXPECT_NE(UsageError({"exec", "sb-1", "echo", bad}).find("UTF-8"), std::string::npos) << bad;
    EXPECT_NE(UsageError({"exec", "sb-1", "--env", std::string("A=") + bad, "true"}), "");
    EXPECT_NE(UsageError({"create", "--meta", std::string("k=") + bad}), "");
    EXPECT_NE(UsageError({"keys", "create", bad}), "");
  }
  // Local file names are bytes, not text.
  ParseAs<CopyCommand>({"cp", "\xff.bin", "sb-1:/tmp/x"});
}

TEST(Exec, MaxOutput) {
  auto c = ParseAs<ExecCommand>({"exec", "sb-1", "--max-output", "1024", "cat"});
  EXPECT_EQ(ExecRequest(c, std::nullopt).body->at("max_output_bytes"), 1024);
}

TEST(RemoteSpec, Forms) {
  auto r = ParseRemoteSpec("sb-1:/tmp/a:b");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->sandbox_id, "sb-1");
  EXPECT_EQ(r->path, "/tmp/a:b");
  EXPECT_FALSE(ParseRemoteSpec("./a:/b"));
  EXPECT_FALSE(ParseRemoteSpec("/abs/x:y"));
  EXPECT_FALSE(ParseRemoteSpec("plain"));
  EXPECT_FALSE(ParseRemoteSpec(":/x"));
  EXPECT_FALSE(ParseRemoteSpec("-"));
  auto rel = ParseRemoteSpec("sb-1:rel");
  ASSERT_TRUE(rel);
  EXPECT_EQ(rel->path, "rel");
}

TEST(Copy, Upload) {
  auto c = ParseAs<CopyCommand>({"cp", "--mode", "0755", "-p", "./run.sh", "sb-1:/opt/my run.sh"});
  EXPECT_EQ(c.direction, CopyCommand::Direction::kUpload);
  EXPECT_EQ(c.local, "./run.sh");
  EXPECT_EQ(c.sandbox_id, "sb-1");
  EXPECT_EQ(c.remote_path, "/opt/my run.sh");
  EXPECT_EQ(c.mode, "0755");
  EXPECT_TRUE(c.parents);
  auto r = UploadRequest(c, c.remote_path);
  EXPECT_EQ(r.method, verb::put);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/files?path=/opt/my%20run.sh&mode=0755&parents=1");
  EXPECT_FALSE(r.body);
}

TEST(Copy, Download) {
  auto c = ParseAs<CopyCommand>({"cp", "sb-1:/etc/os-release", "-"});
  EXPECT_EQ(c.direction, CopyCommand::Direction::kDownload);
  EXPECT_EQ(c.local, "-");
  EXPECT_EQ(c.remote_path, "/etc/os-release");
  auto r = DownloadRequest(c.sandbox_id, "/a&b=c");
  EXPECT_EQ(r.method, verb::get);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/files?path=/a%26b%3Dc");
}

TEST(Copy, BadForms) {
  EXPECT_NE(UsageError({"cp", "a", "b"}).find("sandbox path"), std::string::npos);
  EXPECT_NE(UsageError({"cp", "sb-1:/a", "sb-2:/b"}), "");
  EXPECT_NE(UsageError({"cp", "a", "sb-1:rel"}).find("absolute"), std::string::npos);
  EXPECT_NE(UsageError({"cp", "a"}), "");
  EXPECT_NE(UsageError({"cp", "a", "sb-1:/b", "c"}), "");
  EXPECT_NE(UsageError({"cp", "--mode", "rwx", "a", "sb-1:/b"}), "");
  EXPECT_NE(UsageError({"cp", "--mode", "0855", "a", "sb-1:/b"}), "");
  EXPECT_NE(UsageError({"cp", "--mode", "64", "a", "sb-1:/b"}), "");
  EXPECT_NE(UsageError({"cp", "--mode", "06444", "a", "sb-1:/b"}), "");
  EXPECT_NE(UsageError({"cp", "--mode", "0644", "sb-1:/b", "a"}).find("uploads only"),
            std::string::npos);
  EXPECT_NE(UsageError({"cp", "-", "sb-1:/dir/"}), "");
}

TEST(Screenshot, FormatFromOptionOrName) {
  auto png = ParseAs<ScreenshotCommand>({"screenshot", "sb-1", "-o", "shot.png"});
  EXPECT_EQ(png.output, "shot.png");
  EXPECT_EQ(png.format, "png");
  EXPECT_EQ(ScreenshotRequest(png).target, "/v1/sandboxes/sb-1/screenshot?format=png");
  EXPECT_EQ(ParseAs<ScreenshotCommand>({"screenshot", "sb-1", "-o", "a.JPG"}).format, "jpeg");
  EXPECT_EQ(
      ParseAs<ScreenshotCommand>({"screenshot", "--output=-", "sb-1", "--format", "jpeg"}).format,
      "jpeg");
  EXPECT_NE(UsageError({"screenshot", "sb-1"}).find("-o FILE"), std::string::npos);
  EXPECT_NE(UsageError({"screenshot", "sb-1", "-o", "x", "--format", "gif"}), "");
}

TEST(Token, CreateListRemove) {
  auto c = ParseAs<TokenCreateCommand>({"token", "sb-1", "--scope", "control", "--ttl", "60"});
  EXPECT_EQ(c.sandbox_id, "sb-1");
  auto r = TokenCreateRequest(c);
  EXPECT_EQ(r.method, verb::post);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/tokens");
  EXPECT_EQ(*r.body, nlohmann::json::parse(R"({"scope":"control","ttl_s":60})"));
  EXPECT_EQ(TokenCreateRequest(ParseAs<TokenCreateCommand>({"token", "--scope=cdp", "sb-1"}))
                .body->dump(),
            R"({"scope":"cdp"})");

  auto ls = ParseAs<TokenListCommand>({"token", "ls", "sb-1"});
  EXPECT_EQ(TokenListRequest(ls.sandbox_id).target, "/v1/sandboxes/sb-1/tokens");
  auto rm = ParseAs<TokenRemoveCommand>({"token", "rm", "tok_0011223344556677"});
  auto rr = TokenRemoveRequest(rm.token_id);
  EXPECT_EQ(rr.method, verb::delete_);
  EXPECT_EQ(rr.target, "/v1/tokens/tok_0011223344556677");

  EXPECT_NE(UsageError({"token", "sb-1"}).find("--scope"), std::string::npos);
  EXPECT_NE(UsageError({"token", "sb-1", "--scope", "admin"}), "");
  EXPECT_NE(UsageError({"token", "rm"}), "");
  EXPECT_NE(UsageError({"token", "rm", "tok_1", "--scope", "view"}), "");
  EXPECT_NE(UsageError({"token", "ls", "a", "b"}), "");
}

TEST(Events, Requests) {
  auto c = ParseAs<EventsCommand>({"events", "sb-1", "--since", "42", "-f"});
  EXPECT_EQ(c.since, 42u);
  EXPECT_TRUE(c.follow);
  EXPECT_EQ(EventsRequest(c.id, c.since, true).target,
            "/v1/sandboxes/sb-1/events?since=42&follow=1");
  EXPECT_EQ(EventsRequest("sb-1", 0, false).target, "/v1/sandboxes/sb-1/events?since=0&limit=1000");
  EXPECT_EQ(ParseAs<EventsCommand>({"events", "sb-1", "--since", "0"}).since, 0u);
  EXPECT_NE(UsageError({"events", "sb-1", "--since", "-1"}), "");
  EXPECT_NE(UsageError({"events"}), "");
}

TEST(Egress, Show) {
  auto c = ParseAs<EgressShowCommand>({"egress", "sb-1"});
  EXPECT_EQ(c.id, "sb-1");
  auto r = EgressShowRequest(c.id);
  EXPECT_EQ(r.method, verb::get);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/egress");
  EXPECT_FALSE(r.body);
  EXPECT_EQ(EgressShowRequest("a/b").target, "/v1/sandboxes/a%2Fb/egress");
  auto inv = Parse({"egress", "--json", "sb-1"});
  ASSERT_TRUE(inv);
  EXPECT_TRUE(inv->global.json);
}

TEST(Egress, SetKeepsRuleOrder) {
  auto c = ParseAs<EgressSetCommand>({"egress", "sb-1", "set", "--default", "allow", "--deny",
                                      "b.example", "--allow", "2001:db8::/32", "--deny=a.example",
                                      "--allow", "[2001:db8::/32]:443"});
  EXPECT_EQ(c.id, "sb-1");
  EXPECT_EQ(c.policy.default_action, "allow");
  auto r = EgressSetRequest(c);
  EXPECT_EQ(r.method, verb::put);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/egress");
  ASSERT_TRUE(r.body);
  EXPECT_EQ(r.body->dump(), R"({"allow":["2001:db8::/32","[2001:db8::/32]:443"],)"
                            R"("default":"allow","deny":["b.example","a.example"]})");
  // Options may come anywhere among the positionals.
  auto before = ParseAs<EgressSetCommand>({"egress", "--allow", "x.example", "sb-1", "set"});
  EXPECT_EQ(EgressSetRequest(before).body->dump(), R"({"allow":["x.example"]})");
}

TEST(Egress, SetWithNothingSendsEmptyObject) {
  // The daemon then applies its defaults: its default action and no rules.
  auto r = EgressSetRequest(ParseAs<EgressSetCommand>({"egress", "sb-1", "set"}));
  EXPECT_EQ(r.method, verb::put);
  ASSERT_TRUE(r.body);
  EXPECT_EQ(r.body->dump(), "{}");
}

TEST(Egress, BadForms) {
  EXPECT_NE(UsageError({"egress"}).find("egress: missing ID"), std::string::npos);
  EXPECT_NE(UsageError({"egress", "set"}).find("egress: missing ID"), std::string::npos);
  EXPECT_NE(UsageError({"egress", "set", "sb-1"}).find("before set"), std::string::npos);
  EXPECT_NE(UsageError({"egress", ""}).find("empty ID"), std::string::npos);
  EXPECT_NE(UsageError({"egress", "", "set"}).find("empty ID"), std::string::npos);
  EXPECT_NE(UsageError({"egress", "sb-1", "--allow", "x.example"}).find("egress ID set"),
            std::string::npos);
  EXPECT_NE(UsageError({"egress", "sb-1", "--default", "deny"}), "");
  EXPECT_NE(UsageError({"egress", "sb-1", "get"}).find("unknown subcommand \"get\""),
            std::string::npos);
  EXPECT_NE(UsageError({"egress", "sb-1", "set", "x.example"}).find("unexpected argument"),
            std::string::npos);
  EXPECT_NE(UsageError({"egress", "sb-1", "set", "--default", "maybe"}).find("not one of"),
            std::string::npos);
  EXPECT_NE(UsageError({"egress", "sb-1", "set", "--allow"}).find("needs a value"),
            std::string::npos);
  EXPECT_NE(
      UsageError({"egress", "sb-1", "set", "--egress-default", "deny"}).find("unknown option"),
      std::string::npos);
  EXPECT_NE(UsageError({"egress", "sb-1", "set", "--deny", "a\x80"}).find("UTF-8"),
            std::string::npos);
  auto inv = Parse({"egress", "sb-1", "set", "--default", "maybe"});
  ASSERT_FALSE(inv);
  EXPECT_TRUE(inv.error().usage.starts_with("usage: deskbox egress")) << inv.error().usage;
}

TEST(Recording, Subcommands) {
  auto ls = ParseAs<RecordingShowCommand>({"recording", "ls", "sb-1"});
  EXPECT_EQ(ls.id, "sb-1");
  auto show = RecordingRequest(ls.id);
  EXPECT_EQ(show.method, verb::get);
  EXPECT_EQ(show.target, "/v1/sandboxes/sb-1/recording");
  EXPECT_FALSE(show.body);

  auto verify = RecordingVerifyRequest(
      ParseAs<RecordingVerifyCommand>({"recording", "verify", "--json", "sb-1"}).id);
  EXPECT_EQ(verify.method, verb::get);
  EXPECT_EQ(verify.target, "/v1/sandboxes/sb-1/events/verify");
  EXPECT_FALSE(verify.body);

  auto rm = RecordingRemoveRequest(ParseAs<RecordingRemoveCommand>({"recording", "rm", "sb-1"}).id);
  EXPECT_EQ(rm.method, verb::delete_);
  EXPECT_EQ(rm.target, "/v1/sandboxes/sb-1/recording");
  EXPECT_FALSE(rm.body);

  // An id cannot escape its path segment.
  EXPECT_EQ(RecordingRequest("../keys").target, "/v1/sandboxes/..%2Fkeys/recording");
  auto inv = Parse({"recording", "ls", "sb-1", "--url", "http://h:4"});
  ASSERT_TRUE(inv);
  EXPECT_EQ(inv->global.url.port, "4");
}

TEST(Recording, GetWholeOrOneSegment) {
  auto whole = ParseAs<RecordingGetCommand>({"recording", "get", "sb-1"});
  EXPECT_EQ(whole.id, "sb-1");
  EXPECT_FALSE(whole.segment);
  EXPECT_EQ(whole.output, "sb-1.mp4");  // in the current directory
  auto r = RecordingVideoRequest(whole);
  EXPECT_EQ(r.method, verb::get);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/recording.mp4");
  EXPECT_FALSE(r.body);

  auto seg = ParseAs<RecordingGetCommand>({"recording", "get", "sb-1", "--segment", "3"});
  EXPECT_EQ(seg.segment, 3u);
  EXPECT_EQ(seg.output, "sb-1-000003.mp4");
  EXPECT_EQ(RecordingVideoRequest(seg).target, "/v1/sandboxes/sb-1/recording/segments/000003.mp4");
  auto zero = ParseAs<RecordingGetCommand>({"recording", "--segment=0", "get", "-o", "-", "sb-1"});
  EXPECT_EQ(zero.segment, 0u);
  EXPECT_EQ(zero.output, "-");
  EXPECT_EQ(RecordingVideoRequest(zero).target, "/v1/sandboxes/sb-1/recording/segments/000000.mp4");
  auto last = ParseAs<RecordingGetCommand>({"recording", "get", "sb-1", "--segment", "999999"});
  EXPECT_EQ(RecordingVideoRequest(last).target, "/v1/sandboxes/sb-1/recording/segments/999999.mp4");

  auto named = ParseAs<RecordingGetCommand>({"recording", "get", "sb-1", "--output", "/tmp/a.mp4"});
  EXPECT_EQ(named.output, "/tmp/a.mp4");
  // With -o the id need not make a file name.
  EXPECT_EQ(ParseAs<RecordingGetCommand>({"recording", "get", "a/b", "-o", "x.mp4"}).output,
            "x.mp4");
}

TEST(Recording, BadForms) {
  EXPECT_NE(UsageError({"recording"}).find("recording: missing ls, get, verify or rm"),
            std::string::npos);
  for (const char* sub : {"ls", "get", "verify", "rm"}) {
    EXPECT_NE(UsageError({"recording", sub}).find("recording: missing ID"), std::string::npos)
        << sub;
    EXPECT_NE(UsageError({"recording", sub, ""}).find("empty ID"), std::string::npos) << sub;
    EXPECT_NE(UsageError({"recording", sub, "a", "b"}).find("unexpected argument \"b\""),
              std::string::npos)
        << sub;
  }
  EXPECT_NE(UsageError({"recording", "show", "sb-1"}).find("unknown subcommand \"show\""),
            std::string::npos);
  EXPECT_NE(UsageError({"recording", "sb-1"}).find("unknown subcommand \"sb-1\""),
            std::string::npos);
  EXPECT_NE(UsageError({"recording", "sb-1", "ls"}).find("deskbox recording ls ID"),
            std::string::npos);
  EXPECT_NE(UsageError({"recording", "get", "sb-1", "--segment", "1000000"}).find("(0..999999)"),
            std::string::npos);
  for (const char* bad : {"-1", "x", "3.0", "", "1000000", "99999999999999999999999"})
    EXPECT_NE(UsageError({"recording", "get", "sb-1", "--segment", bad}).find("--segment: "),
              std::string::npos)
        << bad;
  EXPECT_NE(UsageError({"recording", "get", "sb-1", "--segment"}).find("needs a value"),
            std::string::npos);
  EXPECT_NE(UsageError({"recording", "ls", "sb-1", "-o", "x"}).find("get only"), std::string::npos);
  EXPECT_NE(UsageError({"recording", "verify", "sb-1", "--segment", "1"}).find("get only"),
            std::string::npos);
  EXPECT_NE(UsageError({"recording", "get", "sb-1", "-o", ""}).find("-o needs a file name"),
            std::string::npos);
  EXPECT_NE(UsageError({"recording", "get", "a/b"}).find("give -o FILE"), std::string::npos);
  EXPECT_NE(UsageError({"recording", "ls", "sb-1", "--ttl", "5"}).find("unknown option --ttl"),
            std::string::npos);
  auto inv = Parse({"recording", "bogus", "sb-1"});
  ASSERT_FALSE(inv);
  EXPECT_TRUE(inv.error().usage.starts_with("usage: deskbox recording")) << inv.error().usage;
}

TEST(Replay, TokenRequestAndUrl) {
  auto c = ParseAs<ReplayCommand>({"replay", "sb-1"});
  EXPECT_EQ(c.id, "sb-1");
  EXPECT_FALSE(c.ttl_s);
  auto r = ReplayTokenRequest(c);
  EXPECT_EQ(r.method, verb::post);
  EXPECT_EQ(r.target, "/v1/sandboxes/sb-1/tokens");
  ASSERT_TRUE(r.body);
  EXPECT_EQ(r.body->dump(), R"({"scope":"replay"})");  // the daemon's default lifetime
  auto ttl = ReplayTokenRequest(ParseAs<ReplayCommand>({"replay", "--ttl=600", "sb-1"}));
  EXPECT_EQ(*ttl.body, nlohmann::json::parse(R"({"scope":"replay","ttl_s":600})"));

  auto url = ParseServerUrl("http://deskbox.example:9000/pre/");
  ASSERT_TRUE(url);
  EXPECT_EQ(ReplayUrl(*url, "sb-1", "dbt_00ff"),
            "http://deskbox.example:9000/pre/v1/sandboxes/sb-1/replay?token=dbt_00ff");
  EXPECT_EQ(ReplayUrl(*ParseServerUrl("h"), "a/b", "t k&n=#"),
            "http://h:80/v1/sandboxes/a%2Fb/replay?token=t%20k%26n%3D%23");

  EXPECT_NE(UsageError({"replay"}).find("replay: missing ID"), std::string::npos);
  EXPECT_NE(UsageError({"replay", "a", "b"}).find("unexpected argument"), std::string::npos);
  EXPECT_NE(UsageError({"replay", "sb-1", "--ttl", "0"}).find("must be at least 1"),
            std::string::npos);
  EXPECT_NE(UsageError({"replay", "sb-1", "--ttl", "1h"}), "");
  EXPECT_NE(UsageError({"replay", "sb-1", "--scope", "view"}).find("unknown option --scope"),
            std::string::npos);
}

TEST(Keys, Subcommands) {
  ParseAs<KeyListCommand>({"keys", "ls"});
  EXPECT_EQ(KeyListRequest().target, "/v1/keys");
  auto create = ParseAs<KeyCreateCommand>({"keys", "create", "ci runner"});
  auto r = KeyCreateRequest(create.name);
  EXPECT_EQ(r.method, verb::post);
  EXPECT_EQ(r.body->dump(), R"({"name":"ci runner"})");
  auto rm = ParseAs<KeyRemoveCommand>({"keys", "rm", "key_1"});
  EXPECT_EQ(KeyRemoveRequest(rm.key_id).target, "/v1/keys/key_1");
  EXPECT_NE(UsageError({"keys"}), "");
  EXPECT_NE(UsageError({"keys", "add", "x"}), "");
  EXPECT_NE(UsageError({"keys", "create"}), "");
  EXPECT_NE(UsageError({"keys", "ls", "x"}), "");
}

TEST(Templates, Request) {
  ParseAs<TemplatesCommand>({"templates"});
  EXPECT_EQ(TemplatesRequest().target, "/v1/templates");
}

// ---- Output ----

TEST(Output, Table) {
  EXPECT_EQ(FormatTable({{"A", "BB", "C"}, {"long", "x", ""}}),
            "A     BB  C\n"
            "long  x\n");
}

Json SampleSandbox() {
  return Json::parse(R"({"id":"sb-00112233445566aa","state":"running",
    "template":"desktop@0123456789abcdef","resolution":{"width":1280,"height":800},
    "timeout_s":3600,"on_timeout":"pause","expires_at":"2026-11-29T12:00:00.000Z",
    "created_at":"2026-11-29T11:00:00.000Z","updated_at":"2026-11-29T11:00:00.000Z",
    "stopped_at":null,"metadata":{"owner":"ana","note":"two\nlines"},"egress":null,
    "failure":null,"create_path":"warm","create_ms":180,
    "events_url":"/v1/sandboxes/sb-00112233445566aa/events","future_field":[1,2]})");
}

TEST(Output, SandboxList) {
  Json paused = SampleSandbox();
  paused["id"] = "sb-2";
  paused["state"] = "paused";
  paused["expires_at"] = nullptr;
  Json list = {{"sandboxes", Json::array({SampleSandbox(), paused})}};
  EXPECT_EQ(FormatSandboxList(list),
            "ID                   STATE    TEMPLATE                  RESOLUTION  EXPIRES          "
            "         CREATED\n"
            "sb-00112233445566aa  running  desktop@0123456789abcdef  1280x800    "
            "2026-11-29T12:00:00.000Z  2026-11-29T11:00:00.000Z\n"
            "sb-2                 paused   desktop@0123456789abcdef  1280x800    -                "
            "         2026-11-29T11:00:00.000Z\n");
  EXPECT_EQ(FormatSandboxList(Json::object()),
            "ID  STATE  TEMPLATE  RESOLUTION  EXPIRES  CREATED\n");
}

TEST(Output, SandboxDetails) {
  EXPECT_EQ(FormatSandbox(SampleSandbox()),
            "id: sb-00112233445566aa\n"
            "state: running\n"
            "template: desktop@0123456789abcdef\n"
            "resolution: 1280x800\n"
            "timeout_s: 3600\n"
            "on_timeout: pause\n"
            "expires_at: 2026-11-29T12:00:00.000Z\n"
            "created_at: 2026-11-29T11:00:00.000Z\n"
            "updated_at: 2026-11-29T11:00:00.000Z\n"
            "stopped_at: -\n"
            "failure: -\n"
            "create_path: warm\n"
            "create_ms: 180\n"
            "metadata.owner: ana\n"
            "metadata.note: two\\nlines\n"
            "egress: -\n"
            "events_url: /v1/sandboxes/sb-00112233445566aa/events\n"
            "future_field: [1,2]\n");
}

TEST(Output, OddlyTypedFieldsStillPrint) {
  Json odd = {{"sandboxes", Json::array({Json{{"id", 7}, {"resolution", "big"}}, Json(3)})}};
  std::string out = FormatSandboxList(odd);
  EXPECT_NE(out.find("7"), std::string::npos);
  EXPECT_NE(out.find("big"), std::string::npos);
}

TEST(Output, TerminalEscapesAreNeutralised) {
  EXPECT_EQ(Scalar(Json("a\x1b[2Jb\x7f")), "a\\x1b[2Jb\\x7f");
  EXPECT_EQ(Scalar(Json("tab\there")), "tab\\there");
  EXPECT_EQ(Scalar(Json(nullptr)), "-");
  EXPECT_EQ(Scalar(Json(true)), "true");
}

TEST(Output, OtherLists) {
  EXPECT_EQ(FormatTokenList(Json::parse(R"({"tokens":[{"id":"tok_1","scope":"view",
      "sandbox_id":"sb-1","created_at":"c","expires_at":"e"}]})")),
            "ID     SCOPE  CREATED  EXPIRES\n"
            "tok_1  view   c        e\n");
  EXPECT_EQ(FormatKeyList(Json::parse(R"({"keys":[{"id":"key_1","name":"ci","created_at":"c"}]})")),
            "ID     NAME  CREATED\n"
            "key_1  ci    c\n");
  EXPECT_EQ(FormatTemplateList(Json::parse(R"({"templates":[{"name":"desktop@ab","default":true,
      "screen":{"width":1280,"height":800},"memory_mib":2048,"vcpus":2,"qemu_version":"7.2",
      "accelerator":"kvm"}]})")),
            "NAME        DEFAULT  SCREEN    MEMORY_MIB  VCPUS  ACCEL\n"
            "desktop@ab  yes      1280x800  2048        2      kvm\n");
}

TEST(Output, EgressPolicy) {
  EXPECT_EQ(FormatEgressPolicy(Json::parse(R"({"default":"deny",
      "allow":["example.com","*.example.com:443"],"deny":["ads.example.com"]})")),
            "default deny\n"
            "allow example.com\n"
            "allow *.example.com:443\n"
            "deny ads.example.com\n");
  EXPECT_EQ(FormatEgressPolicy(Json::parse(R"({"default":"allow","allow":[],"deny":[]})")),
            "default allow\n");
  // Missing or oddly typed fields still print; rules cannot rewrite the terminal.
  EXPECT_EQ(FormatEgressPolicy(Json::parse(R"({"allow":"x","deny":["a\u001b[2J",7]})")),
            "default -\n"
            "deny a\\x1b[2J\n"
            "deny 7\n");
}

TEST(Output, HumanSizesAndDurations) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(1024 * 1024 - 1), "1.0 MiB");
  EXPECT_EQ(HumanBytes(1234567), "1.2 MiB");
  EXPECT_EQ(HumanBytes(5ull << 30), "5.0 GiB");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "16.0 EiB");
  EXPECT_EQ(HumanDuration(0), "0.0s");
  EXPECT_EQ(HumanDuration(42449), "42.4s");
  EXPECT_EQ(HumanDuration(59960), "1m00s");
  EXPECT_EQ(HumanDuration(61000), "1m01s");
  EXPECT_EQ(HumanDuration(3599400), "59m59s");
  EXPECT_EQ(HumanDuration(7384000), "2h03m04s");
  EXPECT_EQ(HumanDuration(UINT64_MAX), "5124095576030h25m52s");
}

Json SampleRecording() {
  return Json::parse(R"({"sandbox_id":"sb-1","enabled":true,"status":"recording","problem":"",
    "bytes":1234567,"duration_ms":61000,"dropped_frames":2,
    "url":"/v1/sandboxes/sb-1/recording.mp4","segments":[
      {"index":0,"file":"000000.mp4","start":"2026-12-04T12:00:00.000Z","start_ms":1796392800000,
       "end":"2026-12-04T12:01:00.000Z","end_ms":1796392860000,"video_offset_ms":0,
       "bytes":1111111,"sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
       "width":1280,"height":800,"truncated":true,"live":false,"url":"u"},
      {"index":1,"file":"000001.mp4","start":"2026-12-04T12:05:00.000Z","start_ms":1796393100000,
       "end":"2026-12-04T12:05:01.000Z","end_ms":1796393101000,"video_offset_ms":60000,
       "bytes":123456,"sha256":"","width":1280,"height":800,"truncated":false,"live":true,
       "url":"u"}]})");
}

TEST(Output, Recording) {
  EXPECT_EQ(FormatRecording(SampleRecording()),
            "status: recording  enabled: true  size: 1.2 MiB  duration: 1m01s  dropped_frames: 2\n"
            "INDEX  START                     END                       DURATION  SIZE       "
            "SCREEN    SHA256            FLAGS\n"
            "0      2026-12-04T12:00:00.000Z  2026-12-04T12:01:00.000Z  1m00s     1.1 MiB    "
            "1280x800  0123456789abcdef  truncated\n"
            "1      2026-12-04T12:05:00.000Z  2026-12-04T12:05:01.000Z  1.0s      120.6 KiB  "
            "1280x800  -                 live\n");
}

TEST(Output, RecordingProblemAndOddFields) {
  Json failed = Json::parse(R"({"enabled":true,"status":"failed","problem":"disk full\u001b[2J",
      "bytes":0,"duration_ms":0,"dropped_frames":0,"segments":[]})");
  EXPECT_EQ(FormatRecording(failed),
            "status: failed  enabled: true  size: 0 B  duration: 0.0s  dropped_frames: 0  "
            "problem: disk full\\x1b[2J\n"
            "INDEX  START  END  DURATION  SIZE  SCREEN  SHA256  FLAGS\n");
  // A newer or older daemon: missing and oddly typed fields still print.
  Json odd = Json::parse(R"({"status":"recording","bytes":"many","segments":[
      {"index":"x","start_ms":5,"end_ms":1,"sha256":7,"width":1280,"truncated":true,
       "live":true},3]})");
  EXPECT_EQ(FormatRecording(odd),
            "status: recording  enabled: -  size: many  duration: -  dropped_frames: -\n"
            "INDEX  START  END  DURATION  SIZE  SCREEN  SHA256  FLAGS\n"
            "x      -      -    -         -     -       7       truncated,live\n"
            "-      -      -    -         -     -       -\n");
}

TEST(Output, Verification) {
  Json ok = Json::parse(R"({"ok":true,"head":"ab12","events":120,"segments_checked":3,
      "problems":[]})");
  EXPECT_TRUE(VerificationOk(ok));
  EXPECT_EQ(FormatVerification(ok), "ok: 120 events, 3 segments checked, head ab12\n");
  Json bad = Json::parse(R"({"ok":false,"head":"ab12","events":120,"segments_checked":3,
      "problems":[{"kind":"segment_modified","index":2,"file":"000002.mp4",
                   "message":"000002.mp4: SHA-256 is 00 where the event log (seq 57) says 11"},
                  {"kind":"log_broken","message":"record 58: bad\nchain"}]})");
  EXPECT_FALSE(VerificationOk(bad));
  EXPECT_EQ(FormatVerification(bad),
            "not ok: 2 problems; 120 events, 3 segments checked, head ab12\n"
            "segment_modified  000002.mp4  000002.mp4: SHA-256 is 00 where the event log (seq "
            "57) says 11\n"
            "log_broken        -           record 58: bad\\nchain\n");
  // Anything but "ok": true is not ok.
  EXPECT_FALSE(VerificationOk(Json::parse(R"({"ok":"true"})")));
  EXPECT_FALSE(VerificationOk(Json::object()));
  EXPECT_EQ(FormatVerification(Json::object()),
            "not ok: 0 problems; - events, - segments checked, head -\n");
}

TEST(Output, ApiErrors) {
  EXPECT_EQ(FormatApiError(404, "Not Found",
                           R"({"error":{"code":"not_found","message":"no sandbox sb-1"}})"),
            "not_found: no sandbox sb-1");
  EXPECT_EQ(FormatApiError(502, "Bad Gateway", "<html>\nproxy\n</html>\n"),
            "HTTP 502 Bad Gateway: <html>\\nproxy\\n</html>");
  EXPECT_EQ(FormatApiError(500, "Internal Server Error", ""), "HTTP 500 Internal Server Error");
  EXPECT_EQ(FormatApiError(400, "Bad Request", R"({"error":"flat"})"),
            R"(HTTP 400 Bad Request: {"error":"flat"})");
  std::string long_body(1000, 'x');
  EXPECT_LT(FormatApiError(500, "E", long_body).size(), 260u);
  EXPECT_EQ(FormatApiError(409, "Conflict",
                           R"({"error":{"code":"invalid_state","message":"a\u001b[31mb"}})"),
            "invalid_state: a\\x1b[31mb");
}

TEST(Output, ExecExitStatus) {
  EXPECT_EQ(ExecExitStatus(Json::parse(R"({"exit_code":0,"signal":0,"timed_out":false})")), 0);
  EXPECT_EQ(ExecExitStatus(Json::parse(R"({"exit_code":3,"signal":0,"timed_out":false})")), 3);
  EXPECT_EQ(ExecExitStatus(Json::parse(R"({"exit_code":-1,"signal":9,"timed_out":false})")), 137);
  EXPECT_EQ(ExecExitStatus(Json::parse(R"({"exit_code":-1,"signal":9,"timed_out":true})")), 124);
  EXPECT_EQ(ExecExitStatus(Json::parse(R"({"exit_code":300})")), 255);
  EXPECT_EQ(ExecExitStatus(Json::parse(R"({})")), 1);
}

TEST(Output, Credentials) {
  EXPECT_TRUE(IsValidCredential("dbk_" + std::string(64, 'a')));
  EXPECT_FALSE(IsValidCredential(""));
  EXPECT_FALSE(IsValidCredential("dbk_a b"));
  EXPECT_FALSE(IsValidCredential("dbk_a\r\nX-Evil: 1"));
  EXPECT_FALSE(IsValidCredential("dbk_\xc3\xa9"));
  EXPECT_FALSE(IsValidCredential(std::string(5000, 'a')));
}

}  // namespace
}  // namespace deskbox::cli
