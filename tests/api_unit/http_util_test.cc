#include <gtest/gtest.h>

#include "api/http_server.h"

namespace deskbox::api {
namespace {

TEST(PercentDecodeTest, DecodesAndRejectsBadEscapes) {
  EXPECT_EQ(PercentDecode("/tmp/a%20b", false), "/tmp/a b");
  EXPECT_EQ(PercentDecode("a+b", true), "a b");
  EXPECT_EQ(PercentDecode("a+b", false), "a+b");
  EXPECT_EQ(PercentDecode("%2e%2E", false), "..");
  EXPECT_EQ(PercentDecode("%00", false), std::string(1, '\0'));
  EXPECT_FALSE(PercentDecode("%", false));
  EXPECT_FALSE(PercentDecode("%4", false));
  EXPECT_FALSE(PercentDecode("%zz", false));
  EXPECT_FALSE(PercentDecode("abc%", false));
}

}  // namespace
}  // namespace deskbox::api
