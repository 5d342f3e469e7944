// Query strings of the desktop calls: the adapters' (display, format, quality), the screenshot's
// (also width and height) and the cursor's (display only). Unknown parameters are refused, and
// the first problem in name order is the one reported.
#include "computer_use/query.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "test_util.h"

namespace deskbox::computer_use::test {
namespace {

using Query = std::map<std::string, std::string>;

std::string Adapter(const Query& q) {
  auto r = ParseAdapterQuery(q);
  if (!r) return Outcome(r.error());
  std::string out =
      r->display ? fmt::format("display={}x{} ", r->display->width, r->display->height) : "";
  return out + fmt::format("{} q={}", ToString(r->image.format), r->image.quality);
}

std::string Screenshot(const Query& q) {
  auto r = ParseScreenshotQuery(q);
  if (!r) return Outcome(r.error());
  std::string out =
      r->display ? fmt::format("display={}x{} ", r->display->width, r->display->height) : "";
  return out + fmt::format("{} q={} size={}x{}", ToString(r->image.format), r->image.quality,
                           r->image.width, r->image.height);
}

std::string Cursor(const Query& q) {
  auto r = ParseCursorQuery(q);
  if (!r) return Outcome(r.error());
  return *r ? fmt::format("display={}x{}", (*r)->width, (*r)->height) : "no display";
}

TEST(AdapterQuery, Defaults) {
  EXPECT_EQ(Adapter({}), "png q=80");
}

TEST(AdapterQuery, Everything) {
  EXPECT_EQ(Adapter({{"display", "1024x640"}, {"format", "jpeg"}, {"quality", "75"}}),
            "display=1024x640 jpeg q=75");
  EXPECT_EQ(Adapter({{"format", "png"}, {"quality", "1"}}), "png q=1");
  EXPECT_EQ(Adapter({{"quality", "100"}}), "png q=100");
  EXPECT_EQ(Adapter({{"quality", "007"}}), "png q=7");
}

TEST(AdapterQuery, Refused) {
  EXPECT_EQ(Adapter({{"format", "gif"}}), "bad_image_format: format must be png or jpeg");
  EXPECT_EQ(Adapter({{"format", "JPEG"}}), "bad_image_format: format must be png or jpeg");
  EXPECT_EQ(Adapter({{"quality", "0"}}), "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Adapter({{"quality", "101"}}), "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Adapter({{"quality", "1000"}}), "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Adapter({{"quality", "-5"}}), "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Adapter({{"quality", ""}}), "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Adapter({{"quality", "high"}}), "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Adapter({{"display", "0x5"}}),
            "bad_display: display must be WIDTHxHEIGHT with sides 1 to 4096 (got '0x5')");
  EXPECT_EQ(Adapter({{"display", "1024"}}),
            "bad_display: display must be WIDTHxHEIGHT (got '1024')");
  // An explicit size is the screenshot's, not the adapters'.
  EXPECT_EQ(Adapter({{"width", "640"}}), "unknown_field: unknown query parameter 'width'");
}

// Names in order: display before format before quality before zoom.
TEST(AdapterQuery, FirstProblemInNameOrder) {
  EXPECT_EQ(Adapter({{"zoom", "2"}, {"quality", "0"}, {"format", "gif"}, {"display", "1x0"}}),
            "bad_display: display must be WIDTHxHEIGHT with sides 1 to 4096 (got '1x0')");
  EXPECT_EQ(Adapter({{"zoom", "2"}, {"quality", "0"}, {"format", "gif"}}),
            "bad_image_format: format must be png or jpeg");
  EXPECT_EQ(Adapter({{"zoom", "2"}, {"quality", "0"}}),
            "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Adapter({{"zoom", "2"}, {"quality", "50"}}),
            "unknown_field: unknown query parameter 'zoom'");
}

TEST(ScreenshotQuery, Defaults) {
  EXPECT_EQ(Screenshot({}), "png q=80 size=0x0");
}

TEST(ScreenshotQuery, Everything) {
  EXPECT_EQ(Screenshot({{"display", "1024x640"},
                        {"format", "jpeg"},
                        {"quality", "60"},
                        {"width", "512"},
                        {"height", "320"}}),
            "display=1024x640 jpeg q=60 size=512x320");
  EXPECT_EQ(Screenshot({{"width", "1"}}), "png q=80 size=1x0");
  EXPECT_EQ(Screenshot({{"height", "4096"}}), "png q=80 size=0x4096");
}

TEST(ScreenshotQuery, Refused) {
  EXPECT_EQ(Screenshot({{"format", "webp"}}),
            "bad_image_format: format must be png or jpeg (got 'webp')");
  EXPECT_EQ(Screenshot({{"quality", "0"}}), "out_of_range: quality must be between 1 and 100");
  EXPECT_EQ(Screenshot({{"width", "0"}}), "out_of_range: width must be between 1 and 4096");
  EXPECT_EQ(Screenshot({{"height", "4097"}}), "out_of_range: height must be between 1 and 4096");
  EXPECT_EQ(Screenshot({{"width", "100000"}}), "out_of_range: width must be between 1 and 4096");
  EXPECT_EQ(Screenshot({{"width", "12px"}}), "out_of_range: width must be between 1 and 4096");
  EXPECT_EQ(Screenshot({{"display", "99999x1"}}),
            "bad_display: display must be WIDTHxHEIGHT with sides 1 to 4096 (got '99999x1')");
  EXPECT_EQ(Screenshot({{"scale", "2"}}), "unknown_field: unknown query parameter 'scale'");
}

TEST(CursorQuery, DisplayOnly) {
  EXPECT_EQ(Cursor({}), "no display");
  EXPECT_EQ(Cursor({{"display", "1280x800"}}), "display=1280x800");
  EXPECT_EQ(Cursor({{"display", "12"}}), "bad_display: display must be WIDTHxHEIGHT (got '12')");
  EXPECT_EQ(Cursor({{"format", "png"}}), "unknown_field: unknown query parameter 'format'");
}

}  // namespace
}  // namespace deskbox::computer_use::test
