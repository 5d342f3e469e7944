// The translation-cache trim plugin (vmhost/src/tcg_trim_plugin.cc) against the QEMU installed
// here: QEMU loads it, and refuses it without the cache size. What it does in a running guest
// is tested on real guests (tests/integration/restore_test.cc, TranslationCacheTrims…).
#include <gtest/gtest.h>

#include "vmhost/qemu_command.h"

namespace deskbox::vmhost {
namespace {

TEST(TcgTrimPlugin, TheInstalledQemuLoadsIt) {
  auto ok = CheckTcgTrimPlugin("qemu-system-x86_64", DESKBOX_TCG_TRIM_PLUGIN);
  EXPECT_TRUE(ok) << ok.error();
}

TEST(TcgTrimPlugin, AFileThatIsNoPluginIsReportedInQemusWords) {
  auto ok = CheckTcgTrimPlugin("qemu-system-x86_64", "/nonexistent/libnothing.so");
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().find("libnothing.so"), std::string::npos) << ok.error();
}

TEST(TcgTrimPlugin, AMissingQemuIsReported) {
  auto ok = CheckTcgTrimPlugin("/nonexistent/qemu", DESKBOX_TCG_TRIM_PLUGIN);
  ASSERT_FALSE(ok);
  EXPECT_NE(ok.error().find("/nonexistent/qemu"), std::string::npos) << ok.error();
}

}  // namespace
}  // namespace deskbox::vmhost
