#include "common/smaps.h"

#include <gtest/gtest.h>

namespace deskbox {
namespace {

// As QEMU's /proc/PID/smaps shows it: a file mapping, two anonymous ones (a translation-cache
// region and a guard page), a named pseudo-mapping, a deleted file with a space in its path.
constexpr std::string_view kSmaps =
    "5636b844b000-5636b8ac4000 r-xp 00497000 fe:00 10977341                   /usr/bin/qemu-system-x86_64\n"
    "Size:               6628 kB\n"
    "Rss:                5120 kB\n"
    "Pss:                 320 kB\n"
    "Anonymous:             0 kB\n"
    "VmFlags: rd ex mr mw me sd \n"
    "7f0638000000-7f0639fff000 rwxp 00000000 00:00 0 \n"
    "Size:              32764 kB\n"
    "Rss:               20480 kB\n"
    "Pss:               20480 kB\n"
    "Anonymous:         20480 kB\n"
    "AnonHugePages:         0 kB\n"
    "7f0639fff000-7f063a000000 ---p 00000000 00:00 0\n"
    "Rss:                   0 kB\n"
    "5636b9b10000-5636b9b44000 rw-p 00000000 00:00 0                          [heap]\n"
    "Rss:                 200 kB\n"
    "7f0700000000-7f0780000000 rw-p 00000000 fe:00 42                         /var/cache/t/my ram (deleted)\n"
    "Pss:                  64 kB\n"
    "Anonymous:            16 kB\n";

TEST(Smaps, HeadersAndSizesOfEachMapping) {
  auto m = ParseSmaps(kSmaps);
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].start, 0x5636b844b000u);
  EXPECT_EQ(m[0].end, 0x5636b8ac4000u);
  EXPECT_EQ(m[0].perms, "r-xp");
  EXPECT_EQ(m[0].inode, 10977341u);
  EXPECT_EQ(m[0].path, "/usr/bin/qemu-system-x86_64");
  EXPECT_EQ(m[0].rss_kib, 5120u);
  EXPECT_EQ(m[0].pss_kib, 320u);
  EXPECT_FALSE(m[0].anonymous());

  EXPECT_EQ(m[1].perms, "rwxp");
  EXPECT_TRUE(m[1].anonymous()) << "trailing space after the inode";
  EXPECT_EQ(m[1].rss_kib, 20480u);
  EXPECT_EQ(m[1].anonymous_kib, 20480u);

  EXPECT_EQ(m[2].perms, "---p");
  EXPECT_TRUE(m[2].anonymous()) << "no space after the inode";
  EXPECT_EQ(m[2].end - m[2].start, 4096u);

  EXPECT_EQ(m[3].path, "[heap]");
  EXPECT_FALSE(m[3].anonymous());

  EXPECT_EQ(m[4].path, "/var/cache/t/my ram (deleted)");
  EXPECT_EQ(m[4].pss_kib, 64u);
  EXPECT_EQ(m[4].anonymous_kib, 16u);
  EXPECT_EQ(m[4].rss_kib, 0u) << "a size not listed stays 0";
}

TEST(Smaps, NothingBeforeTheFirstHeaderAndNoHeaderAreNoMappings) {
  EXPECT_TRUE(ParseSmaps("").empty());
  EXPECT_TRUE(ParseSmaps("Rss: 4 kB\nPss: 4 kB\n").empty());
  auto m = ParseSmaps("Rss: 9 kB\n1000-2000 rw-p 00000000 00:00 0\nRss: 4 kB");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].rss_kib, 4u) << "the last line needs no newline";
}

}  // namespace
}  // namespace deskbox
