// common/base64: canonical RFC 4648 with padding, both ways.
#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>

namespace deskbox {
namespace {

TEST(Base64, RoundTripsEveryLength) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    auto decoded = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(decoded) << i;
    EXPECT_EQ(*decoded, bytes);
    bytes.push_back(static_cast<char>(i * 37));
  }
}

TEST(Base64, KnownVectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Decode("Zm9vYg==").value_or("?"), "foob");
  EXPECT_EQ(Base64Encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(Base64, RejectsMalformed) {
  for (const char* bad : {"Zg=", "Z===", "Zh==", "Zm9=Zm9v", "Zm 9", "Zm9v\n", "====", "Zm-_"})
    EXPECT_FALSE(Base64Decode(bad)) << bad;
}

}  // namespace
}  // namespace deskbox
