#include "agent/text.h"

#include <gtest/gtest.h>

#include "agent/error.h"

namespace deskbox::agent {
namespace {

TEST(AgentText, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9\xe2\x9c\x93\xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xe2\x9c"));          // truncated
  EXPECT_EQ(SanitizeUtf8("a\xff" "b\xe2\x9c"), "a\xef\xbf\xbd" "b\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(SanitizeUtf8("\xc3\xa9"), "\xc3\xa9");
}

TEST(AgentText, SanitizesEveryTextField) {
  pb::Response r;
  r.mutable_ready()->set_chromium_version("v\xff");
  r.mutable_ready()->set_kernel_release("6.1\xfe");
  EXPECT_TRUE(SanitizeResponseText(r));
  EXPECT_TRUE(IsValidUtf8(r.ready().chromium_version()));
  EXPECT_TRUE(IsValidUtf8(r.ready().kernel_release()));
  EXPECT_FALSE(SanitizeResponseText(r));
  // The sanitized message serializes and parses back (strict proto3 UTF-8 check).
  pb::Response back;
  EXPECT_TRUE(back.ParseFromString(r.SerializeAsString()));
}

TEST(AgentText, Abbreviate) {
  EXPECT_EQ(Abbreviate("short", 10), "short");
  EXPECT_EQ(Abbreviate("0123456789abc", 10), "0123456789...");
  // Never cuts inside a multi-byte character.
  EXPECT_EQ(Abbreviate("ab\xc3\xa9" "cd", 3), "ab...");
}

TEST(AgentText, ErrnoMapping) {
  EXPECT_EQ(ErrnoError(ENOENT, "x").code, pb::Error::NOT_FOUND);
  EXPECT_EQ(ErrnoError(EACCES, "x").code, pb::Error::PERMISSION_DENIED);
  EXPECT_EQ(ErrnoError(EPERM, "x").code, pb::Error::PERMISSION_DENIED);
  EXPECT_EQ(ErrnoError(EISDIR, "x").code, pb::Error::INVALID_ARGUMENT);
  EXPECT_EQ(ErrnoError(ENOSPC, "x").code, pb::Error::INTERNAL);
  EXPECT_EQ(ErrnoError(ENOENT, "open /a").message, "open /a: No such file or directory");
}

}  // namespace
}  // namespace deskbox::agent
