#include "egress/sniff.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deskbox::egress {
namespace {

using namespace std::string_view_literals;

// ClientHellos sent by `openssl s_client` (OpenSSL 3.0) to a listener on loopback:
// -servername example.com; -noservername; -servername Example.COM -tls1_2.
constexpr uint8_t kOpensslSni[] = {
    0x16, 0x03, 0x01, 0x01, 0x38, 0x01, 0x00, 0x01, 0x34, 0x03, 0x03, 0x39, 0xb5, 0x91, 0x33, 0xf1,
    0x8d, 0xf6, 0x06, 0x7e, 0x21, 0x3c, 0x3c, 0xf8, 0xc6, 0xff, 0x1a, 0xda, 0x30, 0x02, 0x9a, 0xb1,
    0x4c, 0xb8, 0x06, 0x16, 0xdf, 0xef, 0xe1, 0x84, 0x06, 0x5f, 0x18, 0x20, 0x0a, 0x6a, 0xaf, 0x2b,
    0x97, 0x0e, 0x05, 0x18, 0xd5, 0x9a, 0x43, 0xd8, 0x3c, 0x89, 0xe4, 0xe4, 0x7b, 0x3d, 0x4f, 0x6b,
    0x71, 0x11, 0xc2, 0x86, 0xe7, 0x94, 0x5c, 0xc8, 0x40, 0xd0, 0x1b, 0x28, 0x00, 0x3e, 0x13, 0x02,
    0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa,
    0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27,
    0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d,
    0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0xad,
    0x00, 0x00, 0x00, 0x10, 0x00, 0x0e, 0x00, 0x00, 0x0b, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65,
    0x2e, 0x63, 0x6f, 0x6d, 0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16,
    0x00, 0x14, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01, 0x00, 0x01, 0x01,
    0x01, 0x02, 0x01, 0x03, 0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17,
    0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07,
    0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01,
    0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02,
    0x00, 0x2b, 0x00, 0x09, 0x08, 0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03, 0x01, 0x00, 0x2d, 0x00,
    0x02, 0x01, 0x01, 0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20, 0x77, 0x57, 0xbf,
    0xc8, 0xa6, 0xca, 0xad, 0x28, 0x29, 0xf2, 0x0b, 0x13, 0xa7, 0x35, 0xf3, 0x17, 0x98, 0xb6, 0x2e,
    0xf7, 0x0f, 0xc2, 0x8a, 0x35, 0x8a, 0xa4, 0xa0, 0x2a, 0x60, 0x63, 0x22, 0x56,
};
constexpr uint8_t kOpensslNoSni[] = {
    0x16, 0x03, 0x01, 0x01, 0x24, 0x01, 0x00, 0x01, 0x20, 0x03, 0x03, 0xa2, 0xab, 0x7e, 0x85, 0x20,
    0x43, 0xe1, 0x18, 0xb6, 0xf3, 0x85, 0xa2, 0x22, 0x68, 0x1a, 0x34, 0x5f, 0x34, 0xcb, 0x67, 0x8a,
    0x83, 0x75, 0x67, 0x31, 0x68, 0xbe, 0xbd, 0x93, 0x51, 0xa0, 0x7a, 0x20, 0x5f, 0x7c, 0xb5, 0x3e,
    0xb2, 0xe3, 0x97, 0xd0, 0x41, 0xa6, 0x5e, 0x14, 0xd6, 0xb0, 0x4f, 0x61, 0xd4, 0x6f, 0xc7, 0x56,
    0xe3, 0xbe, 0x2a, 0xd7, 0x9a, 0x63, 0x11, 0x89, 0x0b, 0x73, 0xce, 0xa6, 0x00, 0x3e, 0x13, 0x02,
    0x13, 0x03, 0x13, 0x01, 0xc0, 0x2c, 0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa,
    0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e, 0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27,
    0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14, 0x00, 0x39, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d,
    0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c, 0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0x99,
    0x00, 0x0b, 0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x16, 0x00, 0x14, 0x00, 0x1d,
    0x00, 0x17, 0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x01, 0x00, 0x01, 0x01, 0x01, 0x02, 0x01, 0x03,
    0x01, 0x04, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17, 0x00, 0x00, 0x00, 0x0d,
    0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07, 0x08, 0x08, 0x08, 0x09,
    0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01, 0x05, 0x01, 0x06, 0x01,
    0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02, 0x00, 0x2b, 0x00, 0x09,
    0x08, 0x03, 0x04, 0x03, 0x03, 0x03, 0x02, 0x03, 0x01, 0x00, 0x2d, 0x00, 0x02, 0x01, 0x01, 0x00,
    0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20, 0xa1, 0x42, 0x8d, 0x29, 0x36, 0x9f, 0x5c,
    0x5c, 0x75, 0xfc, 0x7c, 0x6b, 0xb3, 0x49, 0xd9, 0x06, 0x62, 0xb1, 0x25, 0x82, 0x4e, 0x71, 0xdb,
    0xaf, 0x6e, 0xbf, 0x23, 0xdf, 0x56, 0x2e, 0x62, 0x48,
};
constexpr uint8_t kOpensslTls12UpperCaseSni[] = {
    0x16, 0x03, 0x01, 0x00, 0xcb, 0x01, 0x00, 0x00, 0xc7, 0x03, 0x03, 0x4f, 0x0c, 0x79, 0xeb, 0x17,
    0x13, 0x19, 0xbb, 0x53, 0xb9, 0x59, 0x0e, 0x54, 0x6c, 0x37, 0xcb, 0xc3, 0xaa, 0x11, 0xdb, 0x65,
    0xae, 0x76, 0x98, 0x78, 0x2d, 0x5b, 0x31, 0x4e, 0x4f, 0x9e, 0x17, 0x00, 0x00, 0x38, 0xc0, 0x2c,
    0xc0, 0x30, 0x00, 0x9f, 0xcc, 0xa9, 0xcc, 0xa8, 0xcc, 0xaa, 0xc0, 0x2b, 0xc0, 0x2f, 0x00, 0x9e,
    0xc0, 0x24, 0xc0, 0x28, 0x00, 0x6b, 0xc0, 0x23, 0xc0, 0x27, 0x00, 0x67, 0xc0, 0x0a, 0xc0, 0x14,
    0x00, 0x39, 0xc0, 0x09, 0xc0, 0x13, 0x00, 0x33, 0x00, 0x9d, 0x00, 0x9c, 0x00, 0x3d, 0x00, 0x3c,
    0x00, 0x35, 0x00, 0x2f, 0x00, 0xff, 0x01, 0x00, 0x00, 0x66, 0x00, 0x00, 0x00, 0x10, 0x00, 0x0e,
    0x00, 0x00, 0x0b, 0x45, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x43, 0x4f, 0x4d, 0x00, 0x0b,
    0x00, 0x04, 0x03, 0x00, 0x01, 0x02, 0x00, 0x0a, 0x00, 0x0c, 0x00, 0x0a, 0x00, 0x1d, 0x00, 0x17,
    0x00, 0x1e, 0x00, 0x19, 0x00, 0x18, 0x00, 0x23, 0x00, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00, 0x17,
    0x00, 0x00, 0x00, 0x0d, 0x00, 0x2a, 0x00, 0x28, 0x04, 0x03, 0x05, 0x03, 0x06, 0x03, 0x08, 0x07,
    0x08, 0x08, 0x08, 0x09, 0x08, 0x0a, 0x08, 0x0b, 0x08, 0x04, 0x08, 0x05, 0x08, 0x06, 0x04, 0x01,
    0x05, 0x01, 0x06, 0x01, 0x03, 0x03, 0x03, 0x01, 0x03, 0x02, 0x04, 0x02, 0x05, 0x02, 0x06, 0x02,
};

std::span<const uint8_t> Bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

void Put16(std::vector<uint8_t>& out, size_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}

std::vector<uint8_t> Filler(size_t n, uint8_t seed) {
  std::vector<uint8_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(seed + i * 7);
  return out;
}

// Builds ClientHellos field by field so that each length can be broken on purpose.
struct HelloBuilder {
  std::vector<uint8_t> session_id = Filler(32, 1);
  std::vector<uint8_t> cipher_suites = {0x13, 0x01, 0x13, 0x02, 0xc0, 0x2b};
  std::vector<uint8_t> compression = {0};
  std::vector<std::pair<uint16_t, std::vector<uint8_t>>> extensions;
  bool with_extensions = true;

  std::vector<uint8_t> Body() const {
    std::vector<uint8_t> b = {0x03, 0x03};
    auto random = Filler(32, 9);
    b.insert(b.end(), random.begin(), random.end());
    b.push_back(static_cast<uint8_t>(session_id.size()));
    b.insert(b.end(), session_id.begin(), session_id.end());
    Put16(b, cipher_suites.size());
    b.insert(b.end(), cipher_suites.begin(), cipher_suites.end());
    b.push_back(static_cast<uint8_t>(compression.size()));
    b.insert(b.end(), compression.begin(), compression.end());
    if (!with_extensions) return b;
    std::vector<uint8_t> ext;
    for (const auto& [type, data] : extensions) {
      Put16(ext, type);
      Put16(ext, data.size());
      ext.insert(ext.end(), data.begin(), data.end());
    }
    Put16(b, ext.size());
    b.insert(b.end(), ext.begin(), ext.end());
    return b;
  }
};

std::vector<uint8_t> Handshake(const std::vector<uint8_t>& body, uint8_t type = 1) {
  std::vector<uint8_t> h = {type, static_cast<uint8_t>(body.size() >> 16),
                            static_cast<uint8_t>(body.size() >> 8),
                            static_cast<uint8_t>(body.size())};
  h.insert(h.end(), body.begin(), body.end());
  return h;
}

// Cuts handshake bytes into TLS handshake records of at most `record_size` bytes each.
std::vector<uint8_t> Records(const std::vector<uint8_t>& handshake, size_t record_size) {
  std::vector<uint8_t> out;
  for (size_t at = 0; at < handshake.size(); at += record_size) {
    size_t n = std::min(record_size, handshake.size() - at);
    out.insert(out.end(), {0x16, 0x03, 0x01});
    Put16(out, n);
    out.insert(out.end(), handshake.begin() + at, handshake.begin() + at + n);
  }
  return out;
}

std::vector<uint8_t> ServerNameExtension(std::vector<std::pair<uint8_t, std::string>> names) {
  std::vector<uint8_t> list;
  for (const auto& [type, name] : names) {
    list.push_back(type);
    Put16(list, name.size());
    list.insert(list.end(), name.begin(), name.end());
  }
  std::vector<uint8_t> ext;
  Put16(ext, list.size());
  ext.insert(ext.end(), list.begin(), list.end());
  return ext;
}

// Shaped like a recent Chromium's: GREASE, ECH GREASE, an X25519Kyber768 key share (1216 + 32
// bytes) and padding, about 1.9 KiB in all.
HelloBuilder ChromiumLikeHello(std::string_view server_name) {
  HelloBuilder h;
  h.cipher_suites = Filler(32, 3);
  h.extensions = {
      {0x2a2a, {}},
      {0x0000, ServerNameExtension({{0, std::string(server_name)}})},
      {0x0017, {}},
      {0xff01, {0x00}},
      {0x000a, Filler(12, 4)},
      {0x000b, {0x01, 0x00}},
      {0x0023, {}},
      {0x0010, Filler(14, 5)},
      {0x0005, {0x01, 0x00, 0x00, 0x00, 0x00}},
      {0x000d, Filler(18, 6)},
      {0x0012, {}},
      {0x0033, Filler(2 + 4 + 1216 + 4 + 32, 7)},
      {0x002d, {0x01, 0x01}},
      {0x002b, Filler(7, 8)},
      {0x001b, {0x02, 0x00, 0x02}},
      {0x4469, {0x00, 0x03, 0x02, 0x68, 0x32}},
      {0xfe0d, Filler(186, 10)},
      {0x3a3a, {0x00}},
      {0x0015, std::vector<uint8_t>(200, 0)},
  };
  return h;
}

void ExpectNeedMoreForEveryPrefix(std::span<const uint8_t> data, size_t step = 1) {
  for (size_t n = 0; n < data.size(); n += step)
    ASSERT_EQ(Sniff(data.first(n)).kind, SniffKind::kNeedMore) << "prefix " << n;
}

TEST(SniffTlsTest, OpensslClientHelloWithSni) {
  auto r = Sniff(kOpensslSni);
  EXPECT_EQ(r.kind, SniffKind::kTls) << r.detail;
  EXPECT_EQ(r.name, "example.com");
  ExpectNeedMoreForEveryPrefix(kOpensslSni);
}

TEST(SniffTlsTest, OpensslClientHelloWithoutSni) {
  auto r = Sniff(kOpensslNoSni);
  EXPECT_EQ(r.kind, SniffKind::kTls) << r.detail;
  EXPECT_EQ(r.name, "");
}

TEST(SniffTlsTest, SniIsNormalized) {
  auto r = Sniff(kOpensslTls12UpperCaseSni);
  EXPECT_EQ(r.kind, SniffKind::kTls) << r.detail;
  EXPECT_EQ(r.name, "example.com");
}

TEST(SniffTlsTest, OpensslClientHelloResplitIntoSmallRecords) {
  std::vector<uint8_t> handshake(std::begin(kOpensslSni) + 5, std::end(kOpensslSni));
  for (size_t record_size : {1, 3, 4, 100}) {
    auto data = Records(handshake, record_size);
    auto r = Sniff(data);
    EXPECT_EQ(r.kind, SniffKind::kTls) << record_size << ": " << r.detail;
    EXPECT_EQ(r.name, "example.com");
  }
  ExpectNeedMoreForEveryPrefix(Records(handshake, 7));
}

TEST(SniffTlsTest, ChromiumLikeHelloAcrossRecordsAndFeeds) {
  auto handshake = Handshake(ChromiumLikeHello("www.Example.org").Body());
  ASSERT_GT(handshake.size(), 1800u);
  for (size_t record_size : {size_t{512}, size_t{1000}, handshake.size()}) {
    auto data = Records(handshake, record_size);
    ExpectNeedMoreForEveryPrefix(data);
    auto r = Sniff(data);
    EXPECT_EQ(r.kind, SniffKind::kTls) << r.detail;
    EXPECT_EQ(r.name, "www.example.org");
  }
}

TEST(SniffTlsTest, LargestHelloWithinTheLimit) {
  auto hello = ChromiumLikeHello("big.example");
  hello.extensions.back().second.assign(12000, 0);
  auto data = Records(Handshake(hello.Body()), 4096);
  ASSERT_LT(data.size(), kMaxSniffBytes);
  ExpectNeedMoreForEveryPrefix(data, 97);
  EXPECT_EQ(Sniff(data).name, "big.example");
}

TEST(SniffTlsTest, BytesAfterTheHelloAreIgnored) {
  std::vector<uint8_t> data(std::begin(kOpensslSni), std::end(kOpensslSni));
  data.insert(data.end(), {0x14, 0x03, 0x03, 0x00, 0x01, 0x01, 0x17, 0x03});
  EXPECT_EQ(Sniff(data).kind, SniffKind::kTls);
}

TEST(SniffTlsTest, HelloWithoutExtensions) {
  HelloBuilder h;
  h.with_extensions = false;
  auto r = Sniff(Records(Handshake(h.Body()), 16384));
  EXPECT_EQ(r.kind, SniffKind::kTls) << r.detail;
  EXPECT_EQ(r.name, "");
}

TEST(SniffTlsTest, SniOfAnotherNameTypeIsSkipped) {
  HelloBuilder h;
  h.extensions = {{0, ServerNameExtension({{7, "x"}, {0, "a.example"}})}};
  auto r = Sniff(Records(Handshake(h.Body()), 16384));
  EXPECT_EQ(r.kind, SniffKind::kTls) << r.detail;
  EXPECT_EQ(r.name, "a.example");
}

TEST(SniffTlsTest, SniMayBeAnAddressLiteral) {
  HelloBuilder h;
  h.extensions = {{0, ServerNameExtension({{0, "192.0.2.1"}})}};
  EXPECT_EQ(Sniff(Records(Handshake(h.Body()), 16384)).name, "192.0.2.1");
}

SniffResult SniffHello(const HelloBuilder& h) {
  return Sniff(Records(Handshake(h.Body()), 16384));
}

TEST(SniffTlsTest, BrokenFieldsAreMalformed) {
  auto malformed = [](const HelloBuilder& h, std::string_view what) {
    auto r = SniffHello(h);
    EXPECT_EQ(r.kind, SniffKind::kMalformed) << what;
    EXPECT_NE(r.detail, "") << what;
  };
  HelloBuilder base;
  base.extensions = {{0, ServerNameExtension({{0, "example.com"}})}};
  ASSERT_EQ(SniffHello(base).kind, SniffKind::kTls);

  auto h = base;
  h.session_id = Filler(33, 0);
  malformed(h, "session id 33");
  h = base;
  h.cipher_suites = {0x13, 0x01, 0x13};
  malformed(h, "odd cipher suites");
  h.cipher_suites = {};
  malformed(h, "no cipher suites");
  h = base;
  h.compression = {};
  malformed(h, "no compression methods");
  h = base;
  h.extensions.push_back({0x0017, {}});
  h.extensions.push_back({0x0017, {}});
  malformed(h, "duplicate extension");
  h = base;
  h.extensions.push_back({0, ServerNameExtension({{0, "other.example"}})});
  malformed(h, "two server_name extensions");
  h = base;
  h.extensions = {{0, ServerNameExtension({{0, "a.example"}, {0, "b.example"}})}};
  malformed(h, "two host_names");
  h.extensions = {{0, ServerNameExtension({{0, ""}})}};
  malformed(h, "empty host_name");
  h.extensions = {{0, ServerNameExtension({{0, "exa mple.com"}})}};
  malformed(h, "space in host_name");
  h.extensions = {{0, ServerNameExtension({{0, std::string("a.example\0b"sv)}})}};
  malformed(h, "NUL in host_name");
  h.extensions = {{0, {0x00, 0x00}}};
  malformed(h, "empty server_name list");
  h.extensions = {{0, {}}};
  malformed(h, "empty server_name extension");
  auto sni = ServerNameExtension({{0, "example.com"}});
  sni[1] += 1;
  h.extensions = {{0, sni}};
  malformed(h, "server_name list longer than its extension");
  sni = ServerNameExtension({{0, "example.com"}});
  sni[4] += 1;
  h.extensions = {{0, sni}};
  malformed(h, "host_name longer than its list");
}

TEST(SniffTlsTest, BrokenOuterLengthsAreMalformed) {
  HelloBuilder h;
  h.extensions = {{0, ServerNameExtension({{0, "example.com"}})}, {0x0017, {}}};
  auto body = h.Body();
  auto sniff_body = [](std::vector<uint8_t> b) { return Sniff(Records(Handshake(b), 16384)).kind; };
  ASSERT_EQ(sniff_body(body), SniffKind::kTls);

  const size_t extensions_length_at = 2 + 32 + 1 + 32 + 2 + 6 + 1 + 1;
  ASSERT_EQ(size_t{body[extensions_length_at]} << 8 | body[extensions_length_at + 1],
            body.size() - extensions_length_at - 2);
  auto b = body;
  b[extensions_length_at + 1] += 1;
  EXPECT_EQ(sniff_body(b), SniffKind::kMalformed) << "extensions longer than the message";
  b = body;
  b[extensions_length_at + 1] -= 1;
  EXPECT_EQ(sniff_body(b), SniffKind::kMalformed) << "extensions shorter than the message";
  b = body;
  b.push_back(0);
  EXPECT_EQ(sniff_body(b), SniffKind::kMalformed) << "trailing byte";
  b = body;
  b[body.size() - 1] = 1;  // the last extension (empty) claims one byte
  EXPECT_EQ(sniff_body(b), SniffKind::kMalformed) << "extension overruns";
  b = body;
  b.resize(extensions_length_at + 1);
  EXPECT_EQ(sniff_body(b), SniffKind::kMalformed) << "half an extensions length";
  b.resize(20);
  EXPECT_EQ(sniff_body(b), SniffKind::kMalformed) << "shorter than the random";

  EXPECT_EQ(Sniff(Records(Handshake(body, 2), 16384)).kind, SniffKind::kMalformed) << "ServerHello";
}

TEST(SniffTlsTest, BrokenRecordsAreMalformedOrOther) {
  std::vector<uint8_t> hello(std::begin(kOpensslSni), std::end(kOpensslSni));
  auto with = [&](size_t at, uint8_t v) {
    auto d = hello;
    d[at] = v;
    return Sniff(d).kind;
  };
  EXPECT_EQ(with(1, 0x01), SniffKind::kOther);  // 0x16 0x01 is no TLS record
  EXPECT_EQ(with(3, 0x00), SniffKind::kMalformed) << "record shorter than the hello";
  EXPECT_EQ(with(5, 0x02), SniffKind::kMalformed) << "not a ClientHello";

  const uint8_t empty_record[] = {0x16, 0x03, 0x01, 0x00, 0x00};
  EXPECT_EQ(Sniff(empty_record).kind, SniffKind::kMalformed);
  const uint8_t huge_record[] = {0x16, 0x03, 0x01, 0x41, 0x01, 0x01};
  EXPECT_EQ(Sniff(huge_record).kind, SniffKind::kMalformed);
  const uint8_t huge_hello[] = {0x16, 0x03, 0x01, 0x00, 0x04, 0x01, 0x01, 0x00, 0x00};
  EXPECT_EQ(Sniff(huge_hello).kind, SniffKind::kMalformed);

  // The hello continues in an alert record instead of a handshake record.
  auto split = Records(std::vector<uint8_t>(hello.begin() + 5, hello.end()), 100);
  split[105] = 0x15;
  EXPECT_EQ(Sniff(split).kind, SniffKind::kMalformed);
  split[105] = 0x16;
  split[106] = 0x02;
  EXPECT_EQ(Sniff(split).kind, SniffKind::kMalformed);
}

SniffResult SniffText(std::string_view s) {
  return Sniff(Bytes(s));
}

TEST(SniffHttpTest, HostHeader) {
  auto r = SniffText("GET /index.html HTTP/1.1\r\nUser-Agent: x\r\nHOST: \t Example.COM \r\n\r\n");
  EXPECT_EQ(r.kind, SniffKind::kHttp) << r.detail;
  EXPECT_EQ(r.name, "example.com");
}

TEST(SniffHttpTest, NeedsTheWholeHead) {
  std::string_view request =
      "POST /api HTTP/1.0\r\nHost: api.example:8080\r\nContent-Length: 3\r\n\r\nabc";
  ExpectNeedMoreForEveryPrefix(Bytes(request.substr(0, request.size() - 3)));
  auto r = SniffText(request);
  EXPECT_EQ(r.kind, SniffKind::kHttp) << r.detail;
  EXPECT_EQ(r.name, "api.example");
}

TEST(SniffHttpTest, MethodsAndHostForms) {
  struct Case {
    std::string_view request, name;
  } cases[] = {
      {"OPTIONS * HTTP/1.1\r\nHost: a.example\r\n\r\n", "a.example"},
      {"CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n", "a.example"},
      {"HEAD / HTTP/1.1\r\nHost: [2001:DB8::1]:8443\r\n\r\n", "2001:db8::1"},
      {"GET / HTTP/1.1\r\nHost: [::1]\r\n\r\n", "::1"},
      {"GET / HTTP/1.1\r\nHost: 192.0.2.7:80\r\n\r\n", "192.0.2.7"},
      {"GET / HTTP/1.1\r\nHost: a.example.\r\n\r\n", "a.example"},
      {"DELETE /x HTTP/1.1\r\nX-Host: evil.example\r\nHost:a.example\r\n\r\n", "a.example"},
      {"PATCH /x HTTP/1.1\r\n\r\n", ""},
      {"GET http://a.example:81/x HTTP/1.1\r\nHost: A.example\r\n\r\n", "a.example"},
      {"GET HTTP://a.example?q HTTP/1.1\r\n\r\n", "a.example"},
  };
  for (const auto& c : cases) {
    auto r = SniffText(c.request);
    EXPECT_EQ(r.kind, SniffKind::kHttp) << c.request << ": " << r.detail;
    EXPECT_EQ(r.name, c.name) << c.request;
  }
}

TEST(SniffHttpTest, BrokenHeadsAreMalformed) {
  std::string_view cases[] = {
      "GET / HTTP/1.1\r\nHost: a.example\r\nhost: b.example\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n",
      "GET / HTTP/1.1\r\nX-Long: a\r\n b\r\nHost: a.example\r\n\r\n",
      "GET / HTTP/1.1\r\n\tHost: a.example\r\n\r\n",
      "GET / HTTP/1.1\r\nHost a.example\r\n\r\n",
      "GET / HTTP/1.1\r\nHost : a.example\r\n\r\n",
      "GET / HTTP/1.1\r\n: a.example\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example:0\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example:65536\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example:\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example:8o\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: ::1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [a.example]\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [::1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [::1]x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example/x\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a..example\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: user@a.example\r\n\r\n",
      "GET / HTTP/1.1\r\nHost:\r\n\r\n",
      "GET / HTTP/1.1\r\nX: y\nHost: a.example\r\n\r\n",
      "GET / HTTP/1.1\r\nX: y\rHost: a.example\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example\0.evil\r\n\r\n"sv,
      "GET / HTTP/2.0\r\nHost: a.example\r\n\r\n",
      "GET /\r\nHost: a.example\r\n\r\n",
      "GET HTTP/1.1\r\n\r\n",
      "GET  HTTP/1.1\r\n\r\n",
      "GET / x HTTP/1.1\r\n\r\n",
      "GET http://b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n",
      "GET http://a.example@b.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
      "GET http://a..b/ HTTP/1.1\r\n\r\n",
  };
  for (std::string_view request : cases) {
    auto r = SniffText(request);
    EXPECT_EQ(r.kind, SniffKind::kMalformed) << request;
    EXPECT_NE(r.detail, "") << request;
  }
}

TEST(SniffTest, UndecidedPrefixesNeedMore) {
  const std::string longest_method(20, 'A');
  for (std::string_view s : {""sv, "G"sv, "GE"sv, "GET"sv, "OPTIONS"sv, "\x16"sv, "\x16\x03"sv,
                             std::string_view(longest_method)})
    EXPECT_EQ(SniffText(s).kind, SniffKind::kNeedMore) << s;
  EXPECT_EQ(SniffText("GET / HTTP/1.1\r\nHost: a.example\r\n").kind, SniffKind::kNeedMore);
}

TEST(SniffTest, OtherProtocols) {
  const std::string too_long_method = std::string(21, 'A') + " / HTTP/1.1\r\n\r\n";
  for (std::string_view s :
       {"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"sv, "get / HTTP/1.1\r\n\r\n"sv,
        std::string_view(too_long_method), "GET\t/ HTTP/1.1\r\n\r\n"sv, "\x00\x01\x02"sv,
        "\x16\x02"sv, "220 smtp.example ESMTP\r\n"sv, " GET / HTTP/1.1"sv})
    EXPECT_EQ(SniffText(s).kind, SniffKind::kOther) << s;
  const uint8_t binary[] = {0x80, 0x2e, 0x01, 0x03, 0x01};  // SSLv2-style hello
  EXPECT_EQ(Sniff(binary).kind, SniffKind::kOther);
}

TEST(NormalizeNameTest, AcceptsAndNormalizes) {
  struct Case {
    std::string_view in, out;
  } cases[] = {
      {"Example.COM", "example.com"},
      {"example.com.", "example.com"},
      {"_dmarc.a-b.example", "_dmarc.a-b.example"},
      {"localhost", "localhost"},
      {"1.2.3.4", "1.2.3.4"},
      {"[::1]", "::1"},
      {"::1", "::1"},
      {"[2001:DB8:0:0::1]", "2001:db8::1"},
      {"::ffff:192.0.2.1", "::ffff:192.0.2.1"},
      {"123abc.example", "123abc.example"},
      {"example.0xg", "example.0xg"},
  };
  for (const auto& c : cases)
    EXPECT_EQ(NormalizeName(c.in), std::optional<std::string>(c.out)) << c.in;
  std::string label63(63, 'a');
  std::string longest = label63 + "." + label63 + "." + label63 + "." + std::string(61, 'b');
  ASSERT_EQ(longest.size(), 253u);
  EXPECT_EQ(NormalizeName(longest), longest);
  EXPECT_EQ(NormalizeName(longest + "."), longest);
}

TEST(NormalizeNameTest, Rejects) {
  std::string label63(63, 'a');
  const std::string too_long = label63 + "." + label63 + "." + label63 + "." + std::string(62, 'b');
  const std::string long_label = label63 + "a.example";
  std::string_view cases[] = {"",
                              ".",
                              "..",
                              "a..b",
                              ".a",
                              "a.b..",
                              "exa mple.com",
                              "a%b",
                              "a/b",
                              "a:b",
                              "a@b",
                              "a\0b"sv,
                              "\xc3\xa9.example",
                              "1.2.3",
                              "999.1.1.1",
                              "01.2.3.4",
                              "127.1",
                              "0x7f.0.0.1",
                              "example.123",
                              "example.0x1f",
                              "1.2.3.4.5",
                              "[1.2.3.4]",
                              "[::1",
                              "::1]",
                              "[fe80::1%eth0]",
                              "fe80::1%eth0",
                              "[]",
                              "[a.example]",
                              too_long,
                              long_label};
  for (std::string_view c : cases) EXPECT_EQ(NormalizeName(c), std::nullopt) << c;
}

TEST(NormalizeNameTest, AddressLiterals) {
  EXPECT_TRUE(IsAddressLiteral("1.2.3.4"));
  EXPECT_TRUE(IsAddressLiteral("::1"));
  EXPECT_TRUE(IsAddressLiteral("2001:db8::1"));
  EXPECT_FALSE(IsAddressLiteral("[::1]"));
  EXPECT_FALSE(IsAddressLiteral("example.com"));
  EXPECT_FALSE(IsAddressLiteral("1.2.3"));
  EXPECT_FALSE(IsAddressLiteral("1.2.3.4\0x"sv));
  EXPECT_FALSE(IsAddressLiteral(""));
}

}  // namespace
}  // namespace deskbox::egress
