#include "vnc_bridge/rfb_client.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include "vnc_bridge/image.h"

namespace deskbox::vnc_bridge {
namespace {

std::string U16(uint16_t v) {
  return {static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string U32(uint32_t v) {
  return U16(static_cast<uint16_t>(v >> 16)) + U16(static_cast<uint16_t>(v));
}
std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string ServerInit(uint16_t w, uint16_t h, const std::string& name) {
  return U16(w) + U16(h) + std::string(16, '\0') + U32(static_cast<uint32_t>(name.size())) + name;
}
std::string RectHeader(uint16_t x, uint16_t y, uint16_t w, uint16_t h, int32_t enc = 0) {
  return U16(x) + U16(y) + U16(w) + U16(h) + U32(static_cast<uint32_t>(enc));
}
// Raw pixels in our format: B, G, R, unused; the pixel at (x, y) gets R=x, G=y, B=`b`.
std::string Pixels(uint16_t x0, uint16_t y0, uint16_t w, uint16_t h, char b = 7) {
  std::string p;
  for (uint16_t y = 0; y < h; ++y)
    for (uint16_t x = 0; x < w; ++x)
      p += {b, static_cast<char>(y0 + y), static_cast<char>(x0 + x), 0};
  return p;
}
std::string Update(const std::string& rects, uint16_t count) {
  return std::string{0, 0} + U16(count) + rects;
}
std::string FullScreen(uint16_t w, uint16_t h, char b = 7) {
  return Update(RectHeader(0, 0, w, h) + Pixels(0, 0, w, h, b), 1);
}
std::string Handshake(uint16_t w, uint16_t h) {
  return std::string("RFB 003.008\n") + std::string{1, 1} + U32(0) + ServerInit(w, h, "deskbox");
}
const uint8_t* Px(const Framebuffer& fb, uint32_t x, uint32_t y) {
  return &fb.bgrx[(size_t{y} * fb.width + x) * 4];
}

TEST(RfbClientTest, MirrorsTheScreenEvenWhenBytesComeOneByOne) {
  std::string server = Handshake(4, 2);
  server += std::string{2};                            // Bell
  server += std::string{3, 0, 0, 0} + U32(3) + "cut";  // ServerCutText
  server += Update(
      RectHeader(0, 0, 4, 1) + Pixels(0, 0, 4, 1) + RectHeader(0, 1, 4, 1) + Pixels(0, 1, 4, 1), 2);
  RfbClient c;
  std::string sent;
  for (char ch : server) {
    auto r = c.Feed(Bytes(std::string(1, ch)));
    ASSERT_TRUE(r) << r.error().message;
    sent += c.TakeOutput();
  }
  ASSERT_TRUE(c.ready());
  EXPECT_EQ(c.seq(), 1u);
  EXPECT_EQ(c.desktop_name(), "deskbox");
  // Version, security None, ClientInit, SetPixelFormat (20), SetEncodings (4 + 4×4), a full
  // request (10), then the incremental request that follows the first update (10).
  ASSERT_EQ(sent.size(), 12u + 1 + 1 + 20 + 20 + 10 + 10);
  EXPECT_EQ(sent.substr(0, 12), "RFB 003.008\n");
  EXPECT_EQ(sent[14], 0);                          // SetPixelFormat
  EXPECT_EQ(static_cast<uint8_t>(sent[18]), 32u);  // bits per pixel
  EXPECT_EQ(sent[34], 2);                          // SetEncodings
  // Raw, CopyRect, DesktopSize, Fence
  EXPECT_EQ(sent.substr(38, 16),
            U32(0) + U32(1) + U32(static_cast<uint32_t>(-223)) + U32(static_cast<uint32_t>(-312)));
  EXPECT_EQ(sent.substr(54, 10), (std::string{3, 0} + U16(0) + U16(0) + U16(4) + U16(2)));
  EXPECT_EQ(sent.substr(64, 10), (std::string{3, 1} + U16(0) + U16(0) + U16(4) + U16(2)));
  EXPECT_FALSE(c.fences());  // this server sent none
  const auto& fb = c.framebuffer();
  ASSERT_EQ(fb.width, 4u);
  ASSERT_EQ(fb.height, 2u);
  for (uint32_t y = 0; y < 2; ++y)
    for (uint32_t x = 0; x < 4; ++x) {
      EXPECT_EQ(Px(fb, x, y)[0], 7);
      EXPECT_EQ(Px(fb, x, y)[1], y);
      EXPECT_EQ(Px(fb, x, y)[2], x);
    }
  auto ups = c.TakeUpdates();
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(ups[0].damage, std::vector<Rect>{(Rect{0, 0, 4, 2})});
}

TEST(RfbClientTest, IncrementalUpdatesCarryTheirDamageAndAdvanceTheSequence) {
  RfbClient c;
  ASSERT_TRUE(c.Feed(Bytes(Handshake(8, 4) + FullScreen(8, 4))));
  c.TakeUpdates();
  c.TakeOutput();
  ASSERT_TRUE(c.Feed(Bytes(Update(RectHeader(2, 1, 2, 2) + Pixels(2, 1, 2, 2, 9), 1))));
  EXPECT_EQ(c.seq(), 2u);
  auto ups = c.TakeUpdates();
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_EQ(ups[0].seq, 2u);
  EXPECT_EQ(ups[0].damage, std::vector<Rect>{(Rect{2, 1, 2, 2})});
  EXPECT_EQ(Px(c.framebuffer(), 3, 2)[0], 9);
  EXPECT_EQ(Px(c.framebuffer(), 1, 2)[0], 7);
  // Each update is answered with the next incremental request.
  EXPECT_EQ(c.TakeOutput(), (std::string{3, 1} + U16(0) + U16(0) + U16(8) + U16(4)));
  // An empty update counts too (and is asked again).
  ASSERT_TRUE(c.Feed(Bytes(Update("", 0))));
  EXPECT_EQ(c.seq(), 3u);
  EXPECT_EQ(c.TakeOutput().size(), 10u);
}

TEST(RfbClientTest, CopyRectMovesPixelsIncludingOverlappingOnes) {
  RfbClient c;
  ASSERT_TRUE(c.Feed(Bytes(Handshake(4, 4) + FullScreen(4, 4))));
  // Scroll up by one row: rows 1..3 → 0..2 (overlapping).
  ASSERT_TRUE(c.Feed(Bytes(Update(RectHeader(0, 0, 4, 3, 1) + U16(0) + U16(1), 1))));
  for (uint32_t y = 0; y < 3; ++y) EXPECT_EQ(Px(c.framebuffer(), 2, y)[1], y + 1) << y;
  // Scroll down by one row: rows 0..2 → 1..3.
  ASSERT_TRUE(c.Feed(Bytes(Update(RectHeader(0, 1, 4, 3, 1) + U16(0) + U16(0), 1))));
  EXPECT_EQ(Px(c.framebuffer(), 2, 1)[1], 1u);
  EXPECT_EQ(Px(c.framebuffer(), 2, 3)[1], 3u);
  EXPECT_EQ(c.seq(), 3u);
}

TEST(RfbClientTest, DesktopResizeAsksForTheWholeNewScreen) {
  RfbClient c;
  ASSERT_TRUE(c.Feed(Bytes(Handshake(4, 2) + FullScreen(4, 2))));
  c.TakeOutput();
  c.TakeUpdates();
  ASSERT_TRUE(c.Feed(Bytes(Update(RectHeader(0, 0, 6, 3, -223), 1))));
  EXPECT_EQ(c.framebuffer().width, 6u);
  EXPECT_EQ(c.framebuffer().height, 3u);
  EXPECT_FALSE(c.ready());  // until the new screen has arrived whole
  EXPECT_EQ(c.TakeOutput(), (std::string{3, 0} + U16(0) + U16(0) + U16(6) + U16(3)));
  auto ups = c.TakeUpdates();
  ASSERT_EQ(ups.size(), 1u);
  EXPECT_TRUE(ups[0].resized);
  ASSERT_TRUE(c.Feed(Bytes(FullScreen(6, 3))));
  EXPECT_TRUE(c.ready());
  EXPECT_EQ(Px(c.framebuffer(), 5, 2)[2], 5);
}

TEST(RfbClientTest, AsksAgainWhenTheFirstUpdateDoesNotCoverTheScreen) {
  RfbClient c;
  ASSERT_TRUE(c.Feed(Bytes(Handshake(2, 2))));
  c.TakeOutput();
  ASSERT_TRUE(c.Feed(Bytes(Update(RectHeader(0, 0, 2, 1) + Pixels(0, 0, 2, 1), 1))));
  EXPECT_FALSE(c.ready());
  EXPECT_EQ(c.TakeOutput(), (std::string{3, 0} + U16(0) + U16(0) + U16(2) + U16(2)));  // full again
  ASSERT_TRUE(c.Feed(Bytes(FullScreen(2, 2))));
  EXPECT_TRUE(c.ready());
}

TEST(RfbClientTest, InputIsEncodedOnlyOnceReadyAndClampedToTheScreen) {
  RfbClient c;
  EXPECT_FALSE(c.PointerEvent(1, 0, 0));
  EXPECT_FALSE(c.KeyEvent(true, 0x61));
  ASSERT_TRUE(c.Feed(Bytes(Handshake(4, 2) + FullScreen(4, 2))));
  c.TakeOutput();
  ASSERT_TRUE(c.PointerEvent(5, 100, 1));
  ASSERT_TRUE(c.KeyEvent(true, 0x0101F642));
  EXPECT_EQ(c.TakeOutput(),
            (std::string{5, 5} + U16(3) + U16(1) + std::string{4, 1, 0, 0} + U32(0x0101F642)));
}

std::string Fence(uint32_t flags, const std::string& payload) {
  return std::string{static_cast<char>(248), 0, 0, 0} + U32(flags) +
         static_cast<char>(payload.size()) + payload;
}

TEST(RfbClientTest, AnswersTheServersFencesAndTracksItsOwn) {
  RfbClient c;
  ASSERT_TRUE(c.Feed(Bytes(Handshake(4, 2) + FullScreen(4, 2))));
  c.TakeOutput();
  EXPECT_FALSE(c.Fence(1));  // the server has not shown that it does fences
  EXPECT_EQ(c.TakeOutput(), "");
  // A request (bit 31) with BlockBefore and a flag RFB does not define: answered at once with
  // Request and the unknown flag cleared, the payload as it came — even split byte by byte.
  std::string request = Fence(0x80000001u | 0x100u, "ab");
  for (char ch : request) ASSERT_TRUE(c.Feed(Bytes(std::string(1, ch))));
  EXPECT_TRUE(c.fences());
  EXPECT_EQ(c.TakeOutput(), Fence(0x1, "ab"));
  // An empty payload and the other flags.
  ASSERT_TRUE(c.Feed(Bytes(Fence(0x80000006u, ""))));
  EXPECT_EQ(c.TakeOutput(), Fence(0x6, ""));
  // Ours: Request + BlockBefore with the id; the answer names it, in order with the updates.
  EXPECT_EQ(c.fence_answered(), 0u);
  ASSERT_TRUE(c.Fence(7));
  EXPECT_EQ(c.TakeOutput(), Fence(0x80000001u, U32(7)));
  ASSERT_TRUE(
      c.Feed(Bytes(Update(RectHeader(0, 0, 1, 1) + Pixels(0, 0, 1, 1), 1) + Fence(0x1, U32(7)))));
  EXPECT_EQ(c.fence_answered(), 7u);
  EXPECT_EQ(c.seq(), 2u);
  // An answer that is not one of ours (another payload size) changes nothing.
  ASSERT_TRUE(c.Feed(Bytes(Fence(0x1, "xyz"))));
  EXPECT_EQ(c.fence_answered(), 7u);
  EXPECT_EQ(c.TakeOutput(), (std::string{3, 1} + U16(0) + U16(0) + U16(4) + U16(2)));
}

TEST(RfbClientTest, DamageBeyondTheCapCollapsesToItsBoundingBox) {
  RfbClient c;
  ASSERT_TRUE(c.Feed(Bytes(Handshake(200, 2) + FullScreen(200, 2))));
  c.TakeUpdates();
  std::string rects;
  for (uint16_t i = 0; i < 100; ++i) rects += RectHeader(i * 2, 0, 1, 1) + Pixels(i * 2, 0, 1, 1);
  ASSERT_TRUE(c.Feed(Bytes(Update(rects, 100))));
  auto ups = c.TakeUpdates();
  ASSERT_EQ(ups.size(), 1u);
  ASSERT_LE(ups[0].damage.size(), kMaxDamageRects);
  uint32_t right = 0;
  for (const auto& r : ups[0].damage) right = std::max(right, r.x + r.w);
  EXPECT_EQ(right, 199u);
}

TEST(RfbClientTest, RefusesWhatItDidNotAskFor) {
  using C = ErrorCode;
  struct Case {
    std::string bytes;
    std::string mentions;
    ErrorCode code;
  };
  std::vector<Case> cases = {
      {"HTTP/1.1 200\n", "not an RFB server", C::kProtocol},
      {"RFB 003.003\n", "too old", C::kUnsupported},
      {std::string("RFB 003.008\n") + std::string{1, 2}, "None", C::kUnsupported},
      {std::string("RFB 003.008\n") + std::string{0} + U32(7) + "go away", "go away", C::kRefused},
      {std::string("RFB 003.008\n") + std::string{1, 1} + U32(1) + U32(4) + "nope", "nope",
       C::kRefused},
      {std::string("RFB 003.008\n") + std::string{1, 1} + U32(0) + ServerInit(0, 10, ""),
       "out of range", C::kProtocol},
      {std::string("RFB 003.008\n") + std::string{1, 1} + U32(0) + ServerInit(5000, 10, ""),
       "out of range", C::kTooLarge},
      {Handshake(4, 2) + Update(RectHeader(0, 0, 4, 2, 16), 1), "encoding 16", C::kUnsupported},
      {Handshake(4, 2) + Update(RectHeader(1, 0, 4, 2), 1), "outside", C::kProtocol},
      {Handshake(4, 2) + Update(RectHeader(0, 0, 2, 2, 1) + U16(3) + U16(0), 1), "copy source",
       C::kProtocol},
      {Handshake(4, 2) + Update(RectHeader(0, 0, 5000, 2, -223), 1), "out of range", C::kTooLarge},
      {Handshake(4, 2) + std::string{9}, "unknown server message type 9", C::kUnsupported},
      {Handshake(4, 2) + std::string{3, 0, 0, 0} + U32(100u << 20), "too long", C::kTooLarge},
      {Handshake(4, 2) + Fence(0x80000000u, std::string(65, 'x')), "fence payload of 65 bytes",
       C::kTooLarge},
  };
  for (const auto& t : cases) {
    RfbClient c;
    auto r = c.Feed(Bytes(t.bytes));
    ASSERT_FALSE(r) << t.mentions;
    EXPECT_NE(r.error().message.find(t.mentions), std::string::npos)
        << t.mentions << ": " << r.error().message;
    EXPECT_EQ(r.error().code, t.code) << t.mentions << ": " << ToString(r.error().code);
    auto again = c.Feed(Bytes(std::string("x")));  // stays failed
    ASSERT_FALSE(again);
    EXPECT_EQ(again.error().code, ErrorCode::kClosed);
    EXPECT_EQ(again.error().message, "the session has already failed");
    EXPECT_TRUE(c.failed());
  }
}

TEST(ImageTest, RendersCropsAndScalesByAveraging) {
  Framebuffer fb;
  fb.width = 4;
  fb.height = 2;
  // Left half black, right half white; the pixel at (3,1) is pure red.
  for (uint32_t y = 0; y < 2; ++y)
    for (uint32_t x = 0; x < 4; ++x) {
      uint8_t v = x < 2 ? 0 : 255;
      fb.bgrx.insert(fb.bgrx.end(), {v, v, v, 0});
    }
  uint8_t* red = &fb.bgrx[(1 * 4 + 3) * 4];
  red[0] = 0, red[1] = 0, red[2] = 255;
  auto full = Render(fb, {}, 0, 0);
  ASSERT_TRUE(full) << full.error().message;
  EXPECT_EQ(full->width, 4u);
  EXPECT_EQ((std::vector<uint8_t>(full->rgb.end() - 3, full->rgb.end())),
            (std::vector<uint8_t>{255, 0, 0}));
  auto half = Render(fb, {}, 2, 1);
  ASSERT_TRUE(half);
  EXPECT_EQ(half->rgb[0], 0);
  EXPECT_EQ(half->rgb[3], 255);                    // R of the right block: all 255
  EXPECT_EQ(half->rgb[4], (255 * 3 + 2) / 4);      // G: one of four pixels is red
  auto crop = Render(fb, Rect{3, 1, 1, 1}, 2, 2);  // upscaled crop repeats the pixel
  ASSERT_TRUE(crop);
  EXPECT_EQ(crop->rgb, (std::vector<uint8_t>{255, 0, 0, 255, 0, 0, 255, 0, 0, 255, 0, 0}));
  auto off_frame = Render(fb, Rect{3, 1, 2, 1}, 0, 0);
  ASSERT_FALSE(off_frame);
  EXPECT_EQ(off_frame.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(off_frame.error().message, "region 2x1+3+1 is outside the 4x2 screen");
  auto too_large = Render(fb, {}, 5000, 10);
  ASSERT_FALSE(too_large);
  EXPECT_EQ(too_large.error().code, ErrorCode::kTooLarge);
  EXPECT_EQ(too_large.error().message, "image size 5000x10 is above 4096x4096");
  auto no_frame = Render(Framebuffer{}, {}, 0, 0);
  ASSERT_FALSE(no_frame);
  EXPECT_EQ(no_frame.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(no_frame.error().message, "no frame");
}

TEST(ImageTest, EncodesPngAndJpeg) {
  RgbImage img;
  img.width = 3;
  img.height = 2;
  img.rgb = {255, 0, 0, 0, 255, 0, 0, 0, 255, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  auto png = EncodePng(img);
  ASSERT_TRUE(png) << png.error().message;
  EXPECT_EQ(png->substr(0, 8), "\x89PNG\r\n\x1a\n");
  EXPECT_EQ(png->substr(12, 4), "IHDR");
  EXPECT_EQ(png->substr(16, 8), U32(3) + U32(2));
  // IDAT inflates back to the rows with their filter bytes.
  auto idat = png->find("IDAT");
  ASSERT_NE(idat, std::string::npos);
  uint32_t len =
      static_cast<uint8_t>((*png)[idat - 4]) << 24 | static_cast<uint8_t>((*png)[idat - 3]) << 16 |
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
  ASSERT_TRUE(jpg) << jpg.error().message;
  EXPECT_EQ(static_cast<uint8_t>((*jpg)[0]), 0xFF);
  EXPECT_EQ(static_cast<uint8_t>((*jpg)[1]), 0xD8);
  auto empty = EncodePng(RgbImage{});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::kBadInput);
  EXPECT_EQ(empty.error().message, "no image");
}

// JPEG has no room for a side over 65500 pixels: libjpeg-turbo refuses, and says so.
TEST(ImageTest, AnImageJpegCannotHoldIsAnEncodingError) {
  RgbImage wide;
  wide.width = 65501;
  wide.height = 1;
  wide.rgb.assign(size_t{wide.width} * 3, 128);
  auto jpg = EncodeJpeg(wide, 80);
  ASSERT_FALSE(jpg);
  EXPECT_EQ(jpg.error().code, ErrorCode::kEncode) << jpg.error().message;
  EXPECT_TRUE(jpg.error().message.starts_with("libjpeg-turbo: ")) << jpg.error().message;
}

}  // namespace
}  // namespace deskbox::vnc_bridge
