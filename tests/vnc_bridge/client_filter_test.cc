#include "vnc_bridge/client_filter.h"

#include <gtest/gtest.h>

namespace deskbox::vnc_bridge {
namespace {

std::string U16(uint16_t v) { return {static_cast<char>(v >> 8), static_cast<char>(v)}; }
std::string U32(uint32_t v) { return U16(static_cast<uint16_t>(v >> 16)) + U16(static_cast<uint16_t>(v)); }
std::span<const uint8_t> Bytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

const std::string kHandshake = std::string("RFB 003.008\n") + '\x01' + '\x00';  // None, not shared
const std::string kHandshakeOut = std::string("RFB 003.008\n") + '\x01' + '\x01';  // forced shared

std::string SetPixelFormat() { return std::string(1, '\0') + std::string(3, '\0') + std::string(16, '\x20'); }
std::string SetEncodings(std::initializer_list<int32_t> encs) {
  std::string m = std::string{'\x02', '\0'} + U16(static_cast<uint16_t>(encs.size()));
  for (auto e : encs) m += U32(static_cast<uint32_t>(e));
  return m;
}
std::string UpdateRequest() { return std::string{'\x03', '\x01'} + U16(0) + U16(0) + U16(1280) + U16(800); }
std::string Key(uint32_t keysym) { return std::string{'\x04', '\x01', '\0', '\0'} + U32(keysym); }
std::string Pointer(uint8_t mask, uint16_t x, uint16_t y) { return std::string{'\x05', static_cast<char>(mask)} + U16(x) + U16(y); }
std::string CutText(const std::string& t) { return std::string{'\x06', '\0', '\0', '\0'} + U32(static_cast<uint32_t>(t.size())) + t; }
std::string QemuKey(uint32_t keysym) { return std::string{'\xff', '\0'} + U16(1) + U32(keysym) + U32(30); }
std::string Fence(const std::string& payload) {
  return std::string{'\xf8', '\0', '\0', '\0'} + U32(1) + static_cast<char>(payload.size()) + payload;
}
std::string DesktopSize(uint8_t screens) {
  return std::string{'\xfb', '\0'} + U16(640) + U16(480) + static_cast<char>(screens) + '\0' + std::string(16u * screens, '\x05');
}
std::string Continuous() { return std::string{'\x96', '\x01'} + U16(0) + U16(0) + U16(10) + U16(10); }

// Feeds `in` in pieces of `chunk` bytes; returns what was let through (or the error).
std::expected<std::string, Error> Filter(bool control, const std::string& in, size_t chunk) {
  ClientFilter f(control);
  std::string out;
  for (size_t i = 0; i < in.size(); i += chunk) {
    auto r = f.Feed(Bytes(in.substr(i, chunk)), out);
    if (!r) return std::unexpected(std::move(r.error()));
  }
  return out;
}

TEST(ClientFilterTest, ViewOnlyDropsInputAndPassesTheRestAtAnySplit) {
  std::string display = SetPixelFormat() + SetEncodings({0, 1, -223, -258, -313}) + UpdateRequest() + Fence("ab") +
                        Continuous();
  std::string input = Key(0x61) + Pointer(1, 10, 20) + CutText("secret") + QemuKey(0x62);
  std::string in = kHandshake + display + input + DesktopSize(2) + UpdateRequest();
  for (size_t chunk : {1u, 2u, 3u, 7u, 13u, 64u, 4096u}) {
    SCOPED_TRACE(chunk);
    auto view = Filter(false, in, chunk);
    ASSERT_TRUE(view) << view.error().message;
    EXPECT_EQ(*view, kHandshakeOut + display + UpdateRequest());
    auto control = Filter(true, in, chunk);
    ASSERT_TRUE(control) << control.error().message;
    // A controlling viewer's input passes; SetDesktopSize is dropped for everyone.
    EXPECT_EQ(*control, kHandshakeOut + display + input + UpdateRequest());
  }
}

TEST(ClientFilterTest, CountsInputByKindForTheEventLog) {
  ClientFilter f(false);
  std::string out;
  ASSERT_TRUE(f.Feed(Bytes(kHandshake + Key(1) + Key(1) + Pointer(0, 1, 1) + QemuKey(2) + CutText("x")), out));
  auto c = f.TakeCounts();
  EXPECT_EQ(c.key, 3u);
  EXPECT_EQ(c.pointer, 1u);
  EXPECT_EQ(c.clipboard, 1u);
  EXPECT_FALSE(f.TakeCounts().any());
  EXPECT_TRUE(f.in_messages());
}

TEST(ClientFilterTest, LargeClipboardIsStreamedNotHeld) {
  std::string text(kMaxViewerCutText, 'x');
  auto control = Filter(true, kHandshake + CutText(text) + Key(3), 4096);
  ASSERT_TRUE(control) << control.error().message;
  EXPECT_EQ(*control, kHandshakeOut + CutText(text) + Key(3));
  auto view = Filter(false, kHandshake + CutText(text) + Key(3), 4096);
  ASSERT_TRUE(view);
  EXPECT_EQ(*view, kHandshakeOut);
  // Extended clipboard: a negative length.
  std::string ext = std::string{'\x06', '\0', '\0', '\0'} + U32(static_cast<uint32_t>(-8)) + "12345678";
  auto e = Filter(true, kHandshake + ext + Key(4), 5);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(*e, kHandshakeOut + ext + Key(4));
}

TEST(ClientFilterTest, OlderProtocolsHaveTheirOwnHandshake) {
  auto v33 = Filter(false, std::string("RFB 003.003\n") + '\0' + Pointer(1, 2, 3) + UpdateRequest(), 1);
  ASSERT_TRUE(v33) << v33.error().message;
  EXPECT_EQ(*v33, std::string("RFB 003.003\n") + '\x01' + UpdateRequest());
  auto v37 = Filter(true, std::string("RFB 003.007\n") + '\x01' + '\x01' + Key(5), 4);
  ASSERT_TRUE(v37) << v37.error().message;
  EXPECT_EQ(*v37, std::string("RFB 003.007\n") + '\x01' + '\x01' + Key(5));
}

TEST(ClientFilterTest, RefusesWhatABrowserViewerHasNoReasonToSend) {
  constexpr auto kUnsupported = ErrorCode::kUnsupported, kTooLarge = ErrorCode::kTooLarge;
  struct Case {
    std::string in, mentions;
    ErrorCode code;
  } cases[] = {
      {"RFB 004.000\n", "protocol version", kUnsupported},
      {"GET / HTTP/1.1\r\n", "protocol version", kUnsupported},
      {std::string("RFB 003.008\n") + '\x02', "security type 2", kUnsupported},
      {kHandshake + '\x07', "unknown RFB message type 7", kUnsupported},
      {kHandshake + '\x01', "unknown RFB message type 1", kUnsupported},
      {kHandshake + std::string{'\x02', '\0'} + U16(257), "257 encodings", kTooLarge},
      {kHandshake + std::string{'\x06', '\0', '\0', '\0'} + U32(kMaxViewerCutText + 1), "clipboard",
       kTooLarge},
      {kHandshake + std::string{'\x06', '\0', '\0', '\0'} + U32(0x80000000u), "clipboard",
       kTooLarge},
      {kHandshake + std::string{'\xf8', '\0', '\0', '\0'} + U32(0) + '\x41', "fence", kTooLarge},
      {kHandshake + std::string{'\xfb', '\0'} + U16(1) + U16(1) + '\x41' + '\0', "65 screens",
       kTooLarge},
      {kHandshake + std::string{'\xff', '\x01'}, "QEMU client message subtype 1", kUnsupported},
  };
  for (const auto& c : cases) {
    for (size_t chunk : {1u, 100u}) {
      auto r = Filter(true, c.in, chunk);
      ASSERT_FALSE(r) << c.mentions;
      EXPECT_NE(r.error().message.find(c.mentions), std::string::npos) << r.error().message;
      EXPECT_EQ(r.error().code, c.code) << c.mentions << ": " << ToString(r.error().code);
    }
  }
  // Once failed, it stays failed.
  ClientFilter f(true);
  std::string out;
  EXPECT_FALSE(f.Feed(Bytes(std::string("RFB 009.000\n")), out));
  auto again = f.Feed(Bytes(std::string("RFB 003.008\n")), out);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kClosed);
  EXPECT_EQ(again.error().message, "the viewer's stream already failed");
}

TEST(ClientFilterTest, NothingIsBufferedBeyondOneHeader) {
  // A header arriving a byte at a time produces nothing until it is complete.
  ClientFilter f(true);
  std::string out;
  ASSERT_TRUE(f.Feed(Bytes(kHandshake), out));
  out.clear();
  std::string k = Key(0x41);
  for (size_t i = 0; i + 1 < k.size(); ++i) {
    ASSERT_TRUE(f.Feed(Bytes(k.substr(i, 1)), out));
    EXPECT_TRUE(out.empty());
  }
  ASSERT_TRUE(f.Feed(Bytes(k.substr(k.size() - 1)), out));
  EXPECT_EQ(out, k);
}

}  // namespace
}  // namespace deskbox::vnc_bridge
