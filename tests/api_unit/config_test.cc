#include "api/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace deskbox::api {
namespace {

TEST(ConfigTest, DefaultsWithNothingSet) {
  auto c = ParseConfig({}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.listen_host, "127.0.0.1");
  EXPECT_EQ(c->config.listen_port, 8080);
  EXPECT_EQ(c->config.state_dir, "/var/lib/deskbox");
  EXPECT_EQ(c->config.max_sandboxes, 16u);
  EXPECT_EQ(c->config.tb_size_mib, 512u);
  EXPECT_FALSE(c->config.destroy_on_exit);
}

TEST(ConfigTest, TranslationCacheSize) {
  auto c = ParseConfig({"--tb-size", "128"}, {{"DESKBOX_TB_SIZE_MIB", "1024"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.tb_size_mib, 128u);
  c = ParseConfig({}, {{"DESKBOX_TB_SIZE_MIB", "1024"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.tb_size_mib, 1024u);
}

TEST(ConfigTest, IdleTrimDelay) {
  auto c = ParseConfig({}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.trim_idle_after_s, 60u);
  c = ParseConfig({"--trim-idle-after", "0"}, {{"DESKBOX_TRIM_IDLE_AFTER_S", "120"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.trim_idle_after_s, 0u);
  c = ParseConfig({}, {{"DESKBOX_TRIM_IDLE_AFTER_S", "120"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.trim_idle_after_s, 120u);
}

TEST(ConfigTest, RetrimMark) {
  auto c = ParseConfig({}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.trim_regrown_mib, 48u);
  c = ParseConfig({"--trim-regrown-mib", "0"}, {{"DESKBOX_TRIM_REGROWN_MIB", "96"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.trim_regrown_mib, 0u);
  c = ParseConfig({}, {{"DESKBOX_TRIM_REGROWN_MIB", "96"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.trim_regrown_mib, 96u);
  c = ParseConfig({"--trim-regrown-mib", "4096"}, {});
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().find("--trim-regrown-mib"), std::string::npos) << c.error();
}

TEST(ConfigTest, BrowserRefreshesAtOnce) {
  auto c = ParseConfig({}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.browser_refreshes, 0u);  // the manager works it out from the host's CPUs
  c = ParseConfig({"--browser-refreshes", "3"}, {{"DESKBOX_BROWSER_REFRESHES", "8"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.browser_refreshes, 3u);
}

TEST(ConfigTest, FlagsWinOverEnvironment) {
  auto c = ParseConfig({"--listen", "127.0.0.2:9000", "--warm-pool=3"},
                       {{"DESKBOX_LISTEN", "127.0.0.1:1"}, {"DESKBOX_WARM_POOL", "2"}, {"DESKBOX_MAX_SANDBOXES", "4"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.listen_host, "127.0.0.2");
  EXPECT_EQ(c->config.listen_port, 9000);
  EXPECT_EQ(c->config.warm_pool, 3u);
  EXPECT_EQ(c->config.max_sandboxes, 4u);
}

TEST(ConfigTest, BadValuesNameTheSetting) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string names;
  };
  std::vector<Case> cases = {
      {{}, {{"DESKBOX_LISTEN", "nonsense"}}, "DESKBOX_LISTEN"},
      {{}, {{"DESKBOX_LISTEN", "127.0.0.1:99999"}}, "DESKBOX_LISTEN"},
      {{}, {{"DESKBOX_STATE_DIR", "relative/dir"}}, "DESKBOX_STATE_DIR"},
      {{}, {{"DESKBOX_API_KEY", "short"}}, "DESKBOX_API_KEY"},
      {{}, {{"DESKBOX_MAX_SANDBOXES", "0"}}, "DESKBOX_MAX_SANDBOXES"},
      {{}, {{"DESKBOX_MAX_SANDBOXES", "12abc"}}, "DESKBOX_MAX_SANDBOXES"},
      {{}, {{"DESKBOX_CREATES_PER_SECOND", "nan"}}, "DESKBOX_CREATES_PER_SECOND"},
      {{}, {{"DESKBOX_TB_SIZE_MIB", "15"}}, "DESKBOX_TB_SIZE_MIB"},
      {{}, {{"DESKBOX_TB_SIZE_MIB", "2049"}}, "DESKBOX_TB_SIZE_MIB"},
      {{}, {{"DESKBOX_TB_SIZE_MIB", "64M"}}, "DESKBOX_TB_SIZE_MIB"},
      {{}, {{"DESKBOX_TB_SIZE_MIB", ""}}, "DESKBOX_TB_SIZE_MIB"},
      {{}, {{"DESKBOX_BROWSER_REFRESHES", "257"}}, "DESKBOX_BROWSER_REFRESHES"},
      {{}, {{"DESKBOX_BROWSER_REFRESHES", "-1"}}, "DESKBOX_BROWSER_REFRESHES"},
      {{}, {{"DESKBOX_BROWSER_REFRESHES", "two"}}, "DESKBOX_BROWSER_REFRESHES"},
      {{}, {{"DESKBOX_BROWSER_REFRESHES", ""}}, "DESKBOX_BROWSER_REFRESHES"},
      {{}, {{"DESKBOX_TRIM_IDLE_AFTER_S", "86401"}}, "DESKBOX_TRIM_IDLE_AFTER_S"},
      {{}, {{"DESKBOX_TRIM_IDLE_AFTER_S", "30s"}}, "DESKBOX_TRIM_IDLE_AFTER_S"},
      {{"--accel", "xen"}, {}, "--accel"},
      {{"--template", "../etc"}, {}, "--template"},
      {{"--warm-pool"}, {}, "--warm-pool"},
      {{"--no-such-flag"}, {}, "--no-such-flag"},
  };
  for (const auto& c : cases) {
    auto r = ParseConfig(c.args, c.env);
    ASSERT_FALSE(r) << c.names;
    EXPECT_NE(r.error().find(c.names), std::string::npos) << r.error();
  }
}

TEST(ConfigTest, UsageListsEverySetting) {
  std::string u = Usage();
  for (const char* s : {"DESKBOX_LISTEN", "DESKBOX_STATE_DIR", "DESKBOX_CACHE_DIR", "DESKBOX_API_KEY",
                        "DESKBOX_MAX_SANDBOXES", "DESKBOX_CREATES_PER_SECOND", "DESKBOX_WARM_POOL",
                        "DESKBOX_TB_SIZE_MIB", "DESKBOX_BROWSER_REFRESHES", "DESKBOX_TRIM_IDLE_AFTER_S"})
    EXPECT_NE(u.find(s), std::string::npos) << s;
}

// docs/api.md's configuration table has a row for each setting `deskboxd --help` lists, with its
// flag and its environment variable ("—" where it has none).
TEST(ConfigTest, TheDocsConfigurationTableHasEverySetting) {
  std::ifstream in(DESKBOX_API_DOC);
  std::stringstream doc;
  doc << in.rdbuf();
  ASSERT_FALSE(doc.str().empty()) << DESKBOX_API_DOC;
  std::istringstream usage(Usage());
  size_t settings = 0;
  for (std::string line; std::getline(usage, line);) {
    // "  --flag VALUE  DESKBOX_ENV  meaning", "  --flag  meaning" or "  DESKBOX_ENV  meaning".
    std::istringstream words(line);
    std::string first, value, env;
    words >> first;
    if (first.starts_with("--")) {
      words >> value;
      if (value.starts_with("DESKBOX_")) env = value;
      else if (words >> env; !env.starts_with("DESKBOX_")) env.clear();
    } else if (first.starts_with("DESKBOX_")) {
      env = first;
      first.clear();
    } else {
      continue;
    }
    ++settings;
    std::string row = "| " + (first.empty() ? "—" : "`" + first + "`") + " | " +
                      (env.empty() ? "—" : "`" + env + "`") + " |";
    EXPECT_NE(doc.str().find(row), std::string::npos) << "docs/api.md has no row " << row;
  }
  EXPECT_GT(settings, 30u);
}

TEST(ConfigTest, RecordingDefaultsAndTheDirUnderTheStateDir) {
  auto c = ParseConfig({"--state-dir", "/srv/deskbox"}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_TRUE(c->config.recording);
  EXPECT_EQ(c->config.recording_dir, "/srv/deskbox/recordings");
  EXPECT_EQ(c->config.recording_fps, 15u);
  EXPECT_EQ(c->config.recording_segment_s, 60u);
  EXPECT_EQ(c->config.recording_keyframe_s, 2u);
  EXPECT_EQ(c->config.recording_quota_mib, 20480u);
  EXPECT_EQ(c->config.recording_retention_days, 30u);
  EXPECT_EQ(c->config.recording_max_mib, 4096u);
  c = ParseConfig({"--recording", "off", "--recording-dir", "/data/rec"}, {{"DESKBOX_RECORDING_FPS", "5"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_FALSE(c->config.recording);
  EXPECT_EQ(c->config.recording_dir, "/data/rec");
  EXPECT_EQ(c->config.recording_fps, 5u);
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--recording", "yes"}, {"--recording-fps", "0"}, {"--recording-segment", "5"},
           {"--recording-keyframe", "11"}, {"--recording-retention", "3651"}}) {
    auto r = ParseConfig(bad, {});
    EXPECT_FALSE(r) << bad[0] << " " << bad[1];
    if (!r) {
      EXPECT_NE(r.error().find(bad[0]), std::string::npos) << r.error();
    }
  }
}

TEST(ConfigTest, LogFormatIsTextOrJson) {
  auto c = ParseConfig({}, {});
  ASSERT_TRUE(c);
  EXPECT_EQ(c->config.log_format, log::Format::kText);
  c = ParseConfig({"--log-format=json"}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.log_format, log::Format::kJson);
  c = ParseConfig({}, {{"DESKBOX_LOG_FORMAT", "json"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.log_format, log::Format::kJson);
  auto bad = ParseConfig({"--log-format=xml"}, {});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().find("--log-format"), std::string::npos) << bad.error();
  EXPECT_NE(bad.error().find("'xml' is not text or json"), std::string::npos) << bad.error();
  EXPECT_NE(Usage().find("DESKBOX_LOG_FORMAT"), std::string::npos);
}

TEST(ConfigTest, EgressDefaults) {
  auto c = ParseConfig({}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.egress_default, "deny");
  EXPECT_TRUE(c->config.egress_reachable.empty());
  EXPECT_TRUE(c->config.egress_resolvers.empty());
  EXPECT_EQ(c->config.egress_dns_qps, 100u);
}

TEST(ConfigTest, EgressValuesFromFlags) {
  auto c = ParseConfig(
      {"--egress-default", "allow", "--egress-reachable=10.77.1.0/24,192.168.5.7,fd00:1::/64",
       "--egress-resolvers", "1.1.1.1,[2001:db8::1]:5353,9.9.9.9:53", "--egress-dns-qps=250"},
      {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.egress_default, "allow");
  // CIDRs are kept in their canonical form.
  EXPECT_EQ(c->config.egress_reachable,
            (std::vector<std::string>{"10.77.1.0/24", "192.168.5.7/32", "fd00:1::/64"}));
  EXPECT_EQ(c->config.egress_resolvers,
            (std::vector<std::string>{"1.1.1.1", "[2001:db8::1]:5353", "9.9.9.9:53"}));
  EXPECT_EQ(c->config.egress_dns_qps, 250u);
}

TEST(ConfigTest, EgressValuesFromEnvironment) {
  auto c = ParseConfig({}, {{"DESKBOX_EGRESS_DEFAULT", "allow"},
                            {"DESKBOX_EGRESS_REACHABLE", "10.0.0.0/8,,::1"},
                            {"DESKBOX_EGRESS_RESOLVERS", "2001:db8::53"},
                            {"DESKBOX_EGRESS_DNS_QPS", "10000"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.egress_default, "allow");
  EXPECT_EQ(c->config.egress_reachable, (std::vector<std::string>{"10.0.0.0/8", "::1/128"}));
  EXPECT_EQ(c->config.egress_resolvers, (std::vector<std::string>{"2001:db8::53"}));
  EXPECT_EQ(c->config.egress_dns_qps, 10000u);
}

TEST(ConfigTest, EgressFlagsWinOverEnvironment) {
  auto c = ParseConfig({"--egress-default=deny", "--egress-reachable", "172.16.0.0/12",
                        "--egress-resolvers=8.8.8.8", "--egress-dns-qps", "1"},
                       {{"DESKBOX_EGRESS_DEFAULT", "allow"},
                        {"DESKBOX_EGRESS_REACHABLE", "10.0.0.0/8,192.168.0.0/16"},
                        {"DESKBOX_EGRESS_RESOLVERS", "1.1.1.1,1.0.0.1"},
                        {"DESKBOX_EGRESS_DNS_QPS", "50"}});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.egress_default, "deny");
  // A list given again replaces the earlier one rather than adding to it.
  EXPECT_EQ(c->config.egress_reachable, (std::vector<std::string>{"172.16.0.0/12"}));
  EXPECT_EQ(c->config.egress_resolvers, (std::vector<std::string>{"8.8.8.8"}));
  EXPECT_EQ(c->config.egress_dns_qps, 1u);
}

TEST(ConfigTest, EgressBadValuesNameTheSetting) {
  struct Case {
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string names;
  };
  std::string nine;
  for (int i = 1; i <= 9; ++i)
    nine += (i > 1 ? "," : "") + std::string("192.0.2.") + std::to_string(i);
  std::vector<Case> cases = {
      {{}, {{"DESKBOX_EGRESS_DEFAULT", "maybe"}}, "DESKBOX_EGRESS_DEFAULT"},
      {{}, {{"DESKBOX_EGRESS_DEFAULT", "Allow"}}, "DESKBOX_EGRESS_DEFAULT"},
      {{"--egress-default", "maybe"}, {}, "--egress-default"},
      {{"--egress-default", ""}, {}, "--egress-default"},
      {{}, {{"DESKBOX_EGRESS_REACHABLE", "10.0.0.1/8"}}, "DESKBOX_EGRESS_REACHABLE"},
      {{"--egress-reachable", "10.0.0.0/8,10.0.0.1/8"}, {}, "--egress-reachable"},
      {{"--egress-reachable", "not-an-ip"}, {}, "--egress-reachable"},
      {{"--egress-reachable", "10.0.0.0/33"}, {}, "--egress-reachable"},
      {{"--egress-reachable", "fe80::%eth0/64"}, {}, "--egress-reachable"},
      {{}, {{"DESKBOX_EGRESS_RESOLVERS", "not-an-ip"}}, "DESKBOX_EGRESS_RESOLVERS"},
      {{"--egress-resolvers", "[::1"}, {}, "--egress-resolvers"},
      {{"--egress-resolvers", "1.2.3.4:0"}, {}, "--egress-resolvers"},
      {{"--egress-resolvers", "1.1.1.1,1.2.3.4:70000"}, {}, "--egress-resolvers"},
      {{"--egress-resolvers", "fe80::1%eth0"}, {}, "--egress-resolvers"},
      {{"--egress-resolvers", nine}, {}, "--egress-resolvers"},
      {{}, {{"DESKBOX_EGRESS_RESOLVERS", nine}}, "DESKBOX_EGRESS_RESOLVERS"},
      {{"--egress-dns-qps", "0"}, {}, "--egress-dns-qps"},
      {{}, {{"DESKBOX_EGRESS_DNS_QPS", "0"}}, "DESKBOX_EGRESS_DNS_QPS"},
      {{"--egress-dns-qps", "10001"}, {}, "--egress-dns-qps"},
      {{"--egress-dns-qps", "-1"}, {}, "--egress-dns-qps"},
      {{"--egress-dns-qps"}, {}, "--egress-dns-qps"},
  };
  for (const auto& c : cases) {
    auto r = ParseConfig(c.args, c.env);
    ASSERT_FALSE(r) << c.names;
    EXPECT_TRUE(r.error().starts_with(c.names)) << r.error();
  }
  // The message also says what was wrong.
  auto hosts = ParseConfig({}, {{"DESKBOX_EGRESS_REACHABLE", "10.0.0.1/8"}});
  ASSERT_FALSE(hosts);
  EXPECT_NE(hosts.error().find("host bits"), std::string::npos) << hosts.error();
  auto many = ParseConfig({"--egress-resolvers", nine}, {});
  ASSERT_FALSE(many);
  EXPECT_NE(many.error().find("at most 8"), std::string::npos) << many.error();
  // Eight are fine.
  auto eight = ParseConfig({"--egress-resolvers", nine.substr(0, nine.rfind(','))}, {});
  ASSERT_TRUE(eight) << eight.error();
  EXPECT_EQ(eight->config.egress_resolvers.size(), 8u);
}

TEST(ConfigTest, UsageListsEgressSettings) {
  std::string u = Usage();
  for (const char* s : {"--egress-default", "DESKBOX_EGRESS_DEFAULT", "--egress-reachable",
                        "DESKBOX_EGRESS_REACHABLE", "--egress-resolvers",
                        "DESKBOX_EGRESS_RESOLVERS", "--egress-dns-qps", "DESKBOX_EGRESS_DNS_QPS"})
    EXPECT_NE(u.find(s), std::string::npos) << s;
}

TEST(ParseResolverTest, Forms) {
  using Resolver = std::pair<std::string, uint16_t>;
  struct Case {
    std::string text;
    Resolver want;
  };
  std::vector<Case> cases = {
      {"1.1.1.1", {"1.1.1.1", 53}},
      {"1.1.1.1:5353", {"1.1.1.1", 5353}},
      {"1.1.1.1:1", {"1.1.1.1", 1}},
      {"1.1.1.1:65535", {"1.1.1.1", 65535}},
      {"[2001:db8::1]:53", {"2001:db8::1", 53}},
      {"[2001:db8::1]:5353", {"2001:db8::1", 5353}},
      {"[2001:db8::1]", {"2001:db8::1", 53}},
      {"2001:db8::1", {"2001:db8::1", 53}},
      {"2001:DB8:0:0::1", {"2001:db8::1", 53}},  // canonical form
      {"::1", {"::1", 53}},
      {"127.0.0.53", {"127.0.0.53", 53}},
  };
  for (const auto& c : cases) {
    auto r = ParseResolver(c.text);
    ASSERT_TRUE(r) << c.text << ": " << r.error();
    EXPECT_EQ(*r, c.want) << c.text;
  }
}

// A bare IPv6 address is "IP" (port 53) even when it ends in "::". Fails today: ParseResolver
// takes any text ending in ':' as "IP:" with an empty port (api/src/config.cc:201).
TEST(ParseResolverTest, BareV6EndingInDoubleColon) {
  auto r = ParseResolver("2001:db8::");
  ASSERT_TRUE(r) << r.error();
  EXPECT_EQ(*r, (std::pair<std::string, uint16_t>{"2001:db8::", 53}));
  auto flag = ParseConfig({"--egress-resolvers", "fd00:53::"}, {});
  ASSERT_TRUE(flag) << flag.error();
}

TEST(ParseResolverTest, Refusals) {
  for (std::string text :
       {"", "fe80::1%eth0", "[fe80::1%eth0]:53", "not-an-ip", "example.com", "example.com:53",
        "1.2.3.4:0", "1.2.3.4:65536", "1.2.3.4:", "1.2.3.4:x", "1.2.3.4:53x", "[::1",
        "[::1]:", "[::1]53", "[::1]:0", "1.2.3", "1.2.3.4/32", " 1.2.3.4"}) {
    auto r = ParseResolver(text);
    EXPECT_FALSE(r) << "'" << text << "' was accepted as " << r->first << " port " << r->second;
    if (!r) {
      EXPECT_FALSE(r.error().empty());
    }
  }
}

TEST(ResolversFromResolvConfTest, NameserverLines) {
  std::string text =
      "# Generated by NetworkManager\n"
      "; nameserver 9.9.9.9\n"
      "# nameserver 8.8.4.4\n"
      "search example.com corp.example\n"
      "domain example.com\n"
      "options edns0 trust-ad ndots:2\n"
      "nameserver 127.0.0.53\n"
      "nameserver\t2001:db8::1  # the v6 one\n";
  EXPECT_EQ(ResolversFromResolvConf(text),
            (std::vector<std::string>{"127.0.0.53", "[2001:db8::1]"}));
}

TEST(ResolversFromResolvConfTest, ResultsAreParseResolverInput) {
  for (const auto& r :
       ResolversFromResolvConf("nameserver 1.1.1.1\nnameserver 2606:4700:4700::1111\n")) {
    auto p = ParseResolver(r);
    ASSERT_TRUE(p) << r << ": " << p.error();
    EXPECT_EQ(p->second, 53) << r;
  }
  auto v6 = ResolversFromResolvConf("nameserver 2606:4700:4700::1111");  // no final newline
  ASSERT_EQ(v6.size(), 1u);
  EXPECT_EQ(v6[0], "[2606:4700:4700::1111]");
  EXPECT_EQ(*ParseResolver(v6[0]), (std::pair<std::string, uint16_t>{"2606:4700:4700::1111", 53}));
}

TEST(ResolversFromResolvConfTest, AtMostThree) {
  std::string text =
      "nameserver 192.0.2.1\n"
      "nameserver 192.0.2.2\n"
      "nameserver 192.0.2.3\n"
      "nameserver 192.0.2.4\n";
  EXPECT_EQ(ResolversFromResolvConf(text),
            (std::vector<std::string>{"192.0.2.1", "192.0.2.2", "192.0.2.3"}));
}

TEST(ResolversFromResolvConfTest, GarbageIsSkipped) {
  std::string text =
      "nameserver\n"
      "nameserver \n"
      "nameserver not-an-ip\n"
      "nameserver 1.2.3\n"
      "nameservers 192.0.2.9\n"
      "nameserver192.0.2.8\n"
      "nameserver fe80::1%eth0\n"
      "nameserver 192.0.2.1:53\n"
      "  nameserver 192.0.2.7\n"
      "\n"
      "nameserver 192.0.2.1\n"
      "nameserver 192.0.2.2 trailing words\n"
      "nameserver \t 2001:db8::2;comment\n"
      "nameserver 192.0.2.3\n";
  // Invalid lines do not count toward the three.
  EXPECT_EQ(ResolversFromResolvConf(text),
            (std::vector<std::string>{"192.0.2.1", "192.0.2.2", "[2001:db8::2]"}));
  EXPECT_TRUE(ResolversFromResolvConf("").empty());
  EXPECT_TRUE(ResolversFromResolvConf("search example.com\noptions ndots:1\n").empty());
}

}  // namespace
}  // namespace deskbox::api
