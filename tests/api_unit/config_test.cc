#include "api/config.h"

#include <gtest/gtest.h>

namespace deskbox::api {
namespace {

TEST(ConfigTest, DefaultsWithNothingSet) {
  auto c = ParseConfig({}, {});
  ASSERT_TRUE(c) << c.error();
  EXPECT_EQ(c->config.listen_host, "127.0.0.1");
  EXPECT_EQ(c->config.listen_port, 8080);
  EXPECT_EQ(c->config.state_dir, "/var/lib/deskbox");
  EXPECT_EQ(c->config.max_sandboxes, 16u);
  EXPECT_FALSE(c->config.destroy_on_exit);
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
                        "DESKBOX_MAX_SANDBOXES", "DESKBOX_CREATES_PER_SECOND", "DESKBOX_WARM_POOL"})
    EXPECT_NE(u.find(s), std::string::npos) << s;
}

}  // namespace
}  // namespace deskbox::api
