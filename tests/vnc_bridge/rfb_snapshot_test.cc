#include "vnc_bridge/rfb_snapshot.h"

#include <gtest/gtest.h>
#include <zlib.h>

namespace deskbox::vnc_bridge {
namespace {

std::string U16(uint16_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
std::string U32(uint32_t v) { return U16(static_cast<uint16_t>(v >> 16)) + U16(static_cast<uint16_t>(v)); }
std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string ServerInit(uint16_t w, uint16_t h, const std::string& name) {
  return U16(w) + U16(h) + std::string(16, '\0') + U32(static_cast<uint32_t>(name.size())) + name;
}
std::string Rect(uint16_t x, uint16_t y, uint16_t w, uint16_t h, int32_t enc = 0) {
  return U16(x) + U16(y) + U16(w) + U16(h) + U32(static_cast<uint32_t>(enc));
}
// Raw pixels in our format: B, G, R, unused; the pixel at (x, y) gets R=x, G=y, B=7.
std::string Pixels(uint16_t x0, uint16_t y0, uint16_t w, uint16_t h) {
  std::string p;
  for (uint16_t y = 0; y < h; ++y)
    for (uint16_t x = 0; x < w; ++x) p += {7, static_cast<char>(y0 + y), static_cast<char>(x0 + x), 0};
  return p;
}

std::string Handshake(uint16_t w, uint16_t h) {
  return std::string("RFB 003.008\n") + std::string{1, 1} + U32(0) + ServerInit(w, h, "deskbox");
}

TEST(RfbSnapshotTest, TakesTheWholeScreenEvenWhenBytesComeOneByOne) {
  std::string server = Handshake(4, 2);
  server += std::string{2};                            // Bell
  server += std::string{3, 0, 0, 0} + U32(3) + "cut";  // ServerCutText
  server += std::string{0, 0} + U16(2) + Rect(0, 0, 4, 1) + Pixels(0, 0, 4, 1) + Rect(0, 1, 4, 1) + Pixels(0, 1, 4, 1);
  RfbSnapshotClient c;
  std::string sent;
  for (char ch : server) {
    auto r = c.Feed(Bytes(std::string(1, ch)));
    ASSERT_TRUE(r) << r.error();
    sent += c.TakeOutput();
  }
  ASSERT_TRUE(c.done());
  EXPECT_EQ(c.desktop_name(), "deskbox");
  // Version, security None, ClientInit, SetPixelFormat (20), SetEncodings (8), request (10).
  ASSERT_EQ(sent.size(), 12u + 1 + 1 + 20 + 8 + 10);
  EXPECT_EQ(sent.substr(0, 12), "RFB 003.008\n");
  EXPECT_EQ(sent[12], 1);
  EXPECT_EQ(sent[13], 1);
  EXPECT_EQ(sent[14], 0);                            // SetPixelFormat
  EXPECT_EQ(static_cast<uint8_t>(sent[18]), 32u);   // bits per pixel
  EXPECT_EQ(sent[34], 2);                            // SetEncodings
  std::string request = std::string{3, 0} + U16(0) + U16(0) + U16(4) + U16(2);
  EXPECT_EQ(sent.substr(42), request);
  const auto& img = c.image();
  ASSERT_EQ(img.width, 4u);
  ASSERT_EQ(img.height, 2u);
  for (uint32_t y = 0; y < 2; ++y)
    for (uint32_t x = 0; x < 4; ++x) {
      const uint8_t* px = &img.rgb[(y * 4 + x) * 3];
      EXPECT_EQ(px[0], x);
      EXPECT_EQ(px[1], y);
      EXPECT_EQ(px[2], 7);
    }
}

TEST(RfbSnapshotTest, AsksAgainWhenAnUpdateDoesNotCoverTheScreen) {
  RfbSnapshotClient c;
  ASSERT_TRUE(c.Feed(Bytes(Handshake(2, 2))));
  c.TakeOutput();
  ASSERT_TRUE(c.Feed(Bytes(std::string{0, 0} + U16(1) + Rect(0, 0, 2, 1) + Pixels(0, 0, 2, 1))));
  EXPECT_FALSE(c.done());
  EXPECT_EQ(c.TakeOutput().size(), 10u);  // a new full request
  ASSERT_TRUE(c.Feed(Bytes(std::string{0, 0} + U16(1) + Rect(0, 0, 2, 2) + Pixels(0, 0, 2, 2))));
  EXPECT_TRUE(c.done());
}

TEST(RfbSnapshotTest, RefusesWhatItDidNotAskFor) {
  struct Case {
    std::string bytes;
    std::string mentions;
  };
  std::vector<Case> cases = {
      {"HTTP/1.1 200\n", "not an RFB server"},
      {"RFB 003.003\n", "too old"},
      {std::string("RFB 003.008\n") + std::string{1, 2}, "None"},
      {std::string("RFB 003.008\n") + std::string{0} + U32(7) + "go away", "go away"},
      {std::string("RFB 003.008\n") + std::string{1, 1} + U32(1) + U32(4) + "nope", "nope"},
      {std::string("RFB 003.008\n") + std::string{1, 1} + U32(0) + ServerInit(0, 10, ""), "out of range"},
      {std::string("RFB 003.008\n") + std::string{1, 1} + U32(0) + ServerInit(5000, 10, ""), "out of range"},
      {Handshake(4, 2) + std::string{0, 0} + U16(1) + Rect(0, 0, 4, 2, 16), "encoding 16"},
      {Handshake(4, 2) + std::string{0, 0} + U16(1) + Rect(1, 0, 4, 2), "outside"},
      {Handshake(4, 2) + std::string{9}, "unknown server message type 9"},
      {Handshake(4, 2) + std::string{3, 0, 0, 0} + U32(100u << 20), "too long"},
  };
  for (const auto& t : cases) {
    RfbSnapshotClient c;
    auto r = c.Feed(Bytes(t.bytes));
    ASSERT_FALSE(r) << t.mentions;
    EXPECT_NE(r.error().find(t.mentions), std::string::npos) << t.mentions << ": " << r.error();
    EXPECT_FALSE(c.Feed(Bytes(std::string("x"))));  // stays failed
  }
}

TEST(RfbSnapshotTest, EncodesPngAndJpeg) {
  RgbImage img;
  img.width = 3;
  img.height = 2;
  img.rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto png = EncodePng(img);
  ASSERT_TRUE(png) << png.error();
  EXPECT_EQ(png->substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_EQ(png->substr(12, 4), "IHDR");
  EXPECT_EQ(png->substr(16, 8), U32(3) + U32(2));
  // IDAT inflates back to the rows with their filter bytes.
  auto idat = png->find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  uint32_t len = static_cast<uint8_t>((*png)[idat - 4]) << 24 | static_cast<uint8_t>((*png)[idat - 3]) << 16 |
                 static_cast<uint8_t>((*png)[idat - 2]) << 8 | static_cast<uint8_t>((*png)[idat - 1]);
  std::string raw(2 * (1 + 9), '\0');
  uLongf raw_len = raw.size();
  ASSERT_EQ(uncompress(reinterpret_cast<Bytef*>(raw.data()), &raw_len,
                       reinterpret_cast<const Bytef*>(png->data() + idat + 4), len),
            Z_OK);
  EXPECT_EQ(raw[0], 0);
  EXPECT_EQ(static_cast<uint8_t>(raw[1]), 255);
  EXPECT_EQ(static_cast<uint8_t>(raw[19]), 9);
  auto jpg = EncodeJpeg(img, 80);
  ASSERT_TRUE(jpg) << jpg.error();
  EXPECT_EQ(static_cast<uint8_t>((*jpg)[0]), 0xFF);
  EXPECT_EQ(static_cast<uint8_t>((*jpg)[1]), 0xD8);
  EXPECT_FALSE(EncodePng(RgbImage{}));
}

}  // namespace
}  // namespace deskbox::vnc_bridge
