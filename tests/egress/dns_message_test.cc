#include "egress/dns_message.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deskbox::egress::dns {
namespace {

using boost::asio::ip::make_address;

// `dig example.com` (BIND 9.18): RD and AD set, EDNS0 with a 1232-byte size and a client cookie.
constexpr uint8_t kDigQuery[] = {
    0x4f, 0x2a, 0x01, 0x20, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01,        // header
    0x07, 'e',  'x',  'a',  'm',  'p',  'l',  'e',  0x03, 'c',  'o',  'm',  0x00,  // name
    0x00, 0x01, 0x00, 0x01,                                                        // A IN
    0x00, 0x00, 0x29, 0x04, 0xd0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c,              // OPT, 1232
    0x00, 0x0a, 0x00, 0x08, 0x8e, 0x5d, 0x31, 0x0f, 0x27, 0x90, 0x4b, 0x5e,        // COOKIE
};

// `dig +noedns +cd WWW.Example.COM AAAA`.
constexpr uint8_t kDigNoEdnsQuery[] = {
    0xb3, 0x07, 0x01, 0x30, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x03, 'W',  'W',  'W',  0x07, 'E',  'x',  'a',  'm',  'p',
    'l',  'e',  0x03, 'C',  'O',  'M',  0x00, 0x00, 0x1c, 0x00, 0x01,
};

// Builds DNS messages byte by byte, including broken ones.
struct Message {
  std::vector<uint8_t> bytes;

  Message& U8(uint8_t v) {
    bytes.push_back(v);
    return *this;
  }
  Message& U16(uint16_t v) { return U8(static_cast<uint8_t>(v >> 8)).U8(static_cast<uint8_t>(v)); }
  Message& U32(uint32_t v) {
    return U16(static_cast<uint16_t>(v >> 16)).U16(static_cast<uint16_t>(v));
  }
  Message& Header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
    return U16(id).U16(flags).U16(qd).U16(an).U16(ns).U16(ar);
  }
  // Labels of a dotted name, without the terminating root byte.
  Message& Labels(std::string_view name) {
    while (!name.empty()) {
      size_t dot = name.find('.');
      std::string_view label = name.substr(0, dot);
      U8(static_cast<uint8_t>(label.size()));
      bytes.insert(bytes.end(), label.begin(), label.end());
      name = dot == std::string_view::npos ? "" : name.substr(dot + 1);
    }
    return *this;
  }
  Message& Name(std::string_view name) { return Labels(name).U8(0); }
  Message& Pointer(uint16_t offset) { return U16(0xC000 | offset); }
  Message& Question(std::string_view name, uint16_t qtype, uint16_t qclass = kClassIn) {
    return Name(name).U16(qtype).U16(qclass);
  }
  Message& Opt(uint16_t size, uint32_t ttl = 0, std::vector<uint8_t> options = {}) {
    U8(0).U16(kTypeOpt).U16(size).U32(ttl).U16(static_cast<uint16_t>(options.size()));
    bytes.insert(bytes.end(), options.begin(), options.end());
    return *this;
  }
  // The fixed part of a record after its owner name.
  Message& RecordTail(uint16_t type, uint16_t rclass, uint32_t ttl, std::vector<uint8_t> rdata) {
    U16(type).U16(rclass).U32(ttl).U16(static_cast<uint16_t>(rdata.size()));
    bytes.insert(bytes.end(), rdata.begin(), rdata.end());
    return *this;
  }
  Message& A(std::string_view owner, std::vector<uint8_t> address, uint32_t ttl = 60,
             uint16_t rclass = kClassIn) {
    return Name(owner).RecordTail(address.size() == 4 ? kTypeA : kTypeAaaa, rclass, ttl, address);
  }
  Message& Cname(std::string_view owner, std::string_view target) {
    Message rdata;
    rdata.Name(target);
    return Name(owner).RecordTail(kTypeCname, kClassIn, 300, rdata.bytes);
  }
};

std::vector<uint8_t> V6(std::string_view text) {
  auto b = make_address(text).to_v6().to_bytes();
  return {b.begin(), b.end()};
}

// --- ParseQuery / HeaderId ---

TEST(DnsParseQueryTest, DigQueryWithEdns) {
  auto q = ParseQuery(kDigQuery);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->id, 0x4f2a);
  EXPECT_TRUE(q->recursion_desired);
  EXPECT_FALSE(q->checking_disabled);
  EXPECT_EQ(q->name, "example.com");
  EXPECT_EQ(q->qtype, kTypeA);
  EXPECT_EQ(q->qclass, kClassIn);
  EXPECT_TRUE(q->edns);
  EXPECT_EQ(q->edns_udp_size, 1232);
}

TEST(DnsParseQueryTest, DigQueryWithoutEdnsIsLowercased) {
  auto q = ParseQuery(kDigNoEdnsQuery);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->id, 0xb307);
  EXPECT_TRUE(q->checking_disabled);
  EXPECT_EQ(q->name, "www.example.com");
  EXPECT_EQ(q->qtype, kTypeAaaa);
  EXPECT_FALSE(q->edns);
  EXPECT_EQ(q->edns_udp_size, 512);
}

TEST(DnsParseQueryTest, RootNameSmallEdnsSizeAndOddBytes) {
  auto root = Message().Header(1, 0, 1, 0, 0, 1).Question("", 2).Opt(100).bytes;
  auto q = ParseQuery(root);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->name, "");
  EXPECT_FALSE(q->recursion_desired);
  EXPECT_EQ(q->edns_udp_size, 512);  // sizes below 512 mean 512 (RFC 6891 §6.2.5)

  // Any byte but '.' may be in a label; only ASCII letters are lowercased.
  auto odd =
      Message().Header(1, 0x0100, 1, 0, 0, 0).Name("A_b-\xC3\x89\x01 x").U16(16).U16(1).bytes;
  q = ParseQuery(odd);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->name, "a_b-\xC3\x89\x01 x");
  EXPECT_EQ(q->qtype, kTypeTxt);
}

TEST(DnsParseQueryTest, LongestName) {
  std::string label(63, 'a');
  std::string name =
      label + "." + label + "." + label + "." + std::string(61, 'b');  // 255 on the wire
  auto q = ParseQuery(Message().Header(1, 0, 1, 0, 0, 0).Question(name, 1).bytes);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->name, name);
  EXPECT_FALSE(ParseQuery(Message().Header(1, 0, 1, 0, 0, 0).Question(name + "b", 1).bytes));
}

TEST(DnsParseQueryTest, FormErrors) {
  auto query = [] { return Message().Header(7, 0x0100, 1, 0, 0, 0); };
  constexpr auto kT = ErrorCode::kTruncated, kM = ErrorCode::kMalformed;
  struct Case {
    std::string_view what;
    ErrorCode code;
    std::vector<uint8_t> bytes;
  } cases[] = {
      {"short header", kT, {0, 1, 0, 0, 0, 1, 0, 0}},
      {"two questions", kM,
       Message().Header(7, 0, 2, 0, 0, 0).Question("a", 1).Question("b", 1).bytes},
      {"no question", kM, Message().Header(7, 0, 0, 0, 0, 0).bytes},
      {"response", kM, Message().Header(7, 0x8000, 1, 0, 0, 0).Question("a", 1).bytes},
      {"opcode STATUS", kM, Message().Header(7, 2 << 11, 1, 0, 0, 0).Question("a", 1).bytes},
      {"answer record", kM,
       Message().Header(7, 0, 1, 1, 0, 0).Question("a", 1).A("a", {1, 2, 3, 4}).bytes},
      {"authority record", kM,
       Message().Header(7, 0, 1, 0, 1, 0).Question("a", 1).A("a", {1, 2, 3, 4}).bytes},
      {"two additional", kM,
       Message().Header(7, 0, 1, 0, 0, 2).Question("a", 1).Opt(512).Opt(512).bytes},
      {"additional not OPT", kM,
       Message().Header(7, 0, 1, 0, 0, 1).Question("a", 1).A("", {1, 2, 3, 4}).bytes},
      {"OPT not at root", kM,
       Message()
           .Header(7, 0, 1, 0, 0, 1)
           .Question("a", 1)
           .Name("a")
           .RecordTail(kTypeOpt, 512, 0, {})
           .bytes},
      {"EDNS version 1", kM,
       Message().Header(7, 0, 1, 0, 0, 1).Question("a", 1).Opt(512, 0x00010000).bytes},
      {"EDNS option overruns", kM,
       Message().Header(7, 0, 1, 0, 0, 1).Question("a", 1).Opt(512, 0, {0, 10, 0, 8, 1, 2}).bytes},
      {"EDNS half option", kM,
       Message().Header(7, 0, 1, 0, 0, 1).Question("a", 1).Opt(512, 0, {0, 10}).bytes},
      {"OPT data overruns", kT,
       [] {
         auto m =
             Message().Header(7, 0, 1, 0, 0, 1).Question("a", 1).Opt(512, 0, {0, 10, 0, 0}).bytes;
         m.pop_back();
         return m;
       }()},
      {"missing OPT", kT, Message().Header(7, 0, 1, 0, 0, 1).Question("a", 1).bytes},
      {"truncated name", kT, query().Labels("example").U8(3).U8('c').bytes},
      {"unterminated name", kT, query().Labels("example.com").bytes},
      {"missing qclass", kT, query().Name("example.com").U16(1).bytes},
      {"trailing byte", kM, query().Question("example.com", 1).U8(0).bytes},
      {"pointer to itself", kM, query().Pointer(12).U16(1).U16(1).bytes},
      {"forward pointer", kM, query().Pointer(14).Name("a").U16(1).U16(1).bytes},
      {"pointer into header", kM, query().Pointer(4).U16(1).U16(1).bytes},
      {"half a pointer", kT, query().U8(0xC0).bytes},
      {"label type 0x40", kM, query().U8(0x41).U8('a').U8(0).U16(1).U16(1).bytes},
      {"label type 0x80", kM, query().U8(0x81).U8('a').U8(0).U16(1).U16(1).bytes},
      {"dot in a label", kM, query().U8(3).U8('a').U8('.').U8('b').U8(0).U16(1).U16(1).bytes},
      {"longer than 4096 bytes", kM,
       Message()
           .Header(7, 0, 1, 0, 0, 1)
           .Question("a", 1)
           .Opt(4096, 0, std::vector<uint8_t>(4100, 0))
           .bytes},
  };
  for (const auto& c : cases) {
    auto q = ParseQuery(c.bytes);
    ASSERT_FALSE(q) << c.what;
    EXPECT_EQ(q.error().code, c.code)
        << c.what << ": " << ToString(q.error().code) << " " << q.error().message;
  }
}

TEST(DnsParseQueryTest, PointersMustPointBeforeTheirLabels) {
  // "a" at offset 12, then a pointer back to 12: each pointer must land before the labels it
  // ends, otherwise this would loop.
  auto loop = Message().Header(7, 0, 1, 0, 0, 0).Labels("a").Pointer(12).U16(1).U16(1).bytes;
  auto q = ParseQuery(loop);
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message.find("pointer"), std::string::npos) << q.error().message;

  // A backward pointer is followed: the OPT owner reads as "a", which is not the root.
  auto m = Message().Header(7, 0, 1, 0, 0, 1).Question("a", 1);
  m.Pointer(12).RecordTail(kTypeOpt, 512, 0, {});
  q = ParseQuery(m.bytes);
  ASSERT_FALSE(q);
  EXPECT_NE(q.error().message.find("root"), std::string::npos) << q.error().message;
}

TEST(DnsHeaderIdTest, NeedsAQueryHeader) {
  EXPECT_EQ(HeaderId(std::vector<uint8_t>{0xab, 0xcd, 0x01, 0x00, 0xff, 0xff, 0, 0, 0, 0, 0, 0}),
            0xabcd);
  auto short_header =
      HeaderId(std::vector<uint8_t>{0xab, 0xcd, 0x01, 0x00, 0xff, 0xff, 0, 0, 0, 0, 0});
  ASSERT_FALSE(short_header);
  EXPECT_EQ(short_header.error().code, ErrorCode::kTruncated);
  EXPECT_EQ(short_header.error().message, "message shorter than a DNS header");
  auto response = HeaderId(std::vector<uint8_t>{0xab, 0xcd, 0x81, 0x00, 0, 1, 0, 0, 0, 0, 0, 0});
  ASSERT_FALSE(response);
  EXPECT_EQ(response.error().code, ErrorCode::kMalformed);
  EXPECT_EQ(response.error().message, "message is a response");
}

// --- BuildAnswer / BuildHeaderOnly / BuildQuery ---

uint16_t At16(const std::vector<uint8_t>& m, size_t at) {
  return static_cast<uint16_t>(m[at] << 8 | m[at + 1]);
}

TEST(DnsBuildAnswerTest, RoundTripsThroughParseResponse) {
  auto q = ParseQuery(kDigQuery);
  ASSERT_TRUE(q);
  const Record records[] = {{make_address("192.0.2.1"), 30},
                            {make_address("2001:db8::1"), 40},
                            {make_address("192.0.2.2"), 50}};
  auto answer = BuildAnswer(*q, kNoError, records);

  EXPECT_EQ(At16(answer, 0), 0x4f2a);
  EXPECT_EQ(At16(answer, 2), 0x8180);  // QR RD RA, rcode 0; AD is not copied
  EXPECT_EQ(At16(answer, 4), 1);
  EXPECT_EQ(At16(answer, 6), 3);
  EXPECT_EQ(At16(answer, 8), 0);
  EXPECT_EQ(At16(answer, 10), 1);
  EXPECT_EQ(answer.size(), 12u + 17 + 16 + 28 + 16 + 11);
  // The question is echoed as the guest sent it (minus EDNS), then records owned by offset 12.
  EXPECT_TRUE(std::equal(kDigQuery + 12, kDigQuery + 12 + 17, answer.begin() + 12));
  EXPECT_EQ(At16(answer, 29), 0xC00C);
  const uint8_t opt[] = {0x00, 0x00, 0x29, 0x04, 0xd0, 0, 0, 0, 0, 0, 0};
  EXPECT_TRUE(std::equal(std::begin(opt), std::end(opt), answer.end() - 11));

  auto parsed = ParseResponse(answer, 0x4f2a, "example.com", kTypeA);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->rcode, kNoError);
  EXPECT_FALSE(parsed->truncated);
  ASSERT_EQ(parsed->records.size(), 2u);
  EXPECT_EQ(parsed->records[0].address, make_address("192.0.2.1"));
  EXPECT_EQ(parsed->records[0].ttl, 30u);
  EXPECT_EQ(parsed->records[1].address, make_address("192.0.2.2"));
  EXPECT_TRUE(parsed->cnames.empty());
}

TEST(DnsBuildAnswerTest, RefusalWithoutEdnsCopiesFlags) {
  auto q = ParseQuery(kDigNoEdnsQuery);
  ASSERT_TRUE(q);
  auto answer = BuildAnswer(*q, kRefused, {});
  ASSERT_EQ(answer.size(), sizeof kDigNoEdnsQuery);
  EXPECT_EQ(At16(answer, 2), 0x8000 | 0x0100 | 0x0080 | 0x0010 | kRefused);
  EXPECT_EQ(At16(answer, 6), 0);
  EXPECT_EQ(At16(answer, 10), 0);
  // The name is echoed lowercased.
  EXPECT_EQ(answer[13], 'w');
  auto parsed = ParseResponse(answer, 0xb307, "WWW.example.com.", kTypeAaaa);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_EQ(parsed->rcode, kRefused);
}

TEST(DnsBuildAnswerTest, TruncatesToTheSizeLimit) {
  Query q;
  q.id = 9;
  q.name = "many.example";
  q.qtype = kTypeA;
  q.qclass = kClassIn;
  std::vector<Record> v4(100), v6(100);
  for (size_t i = 0; i < 100; ++i) {
    v4[i] = {boost::asio::ip::address_v4(static_cast<uint32_t>(0x0a000000 + i)), 60};
    v6[i] = {make_address("2001:db8::" + std::to_string(i + 1)), 60};
  }
  const size_t question = 12 + 14 + 4;

  auto plain = BuildAnswer(q, kNoError, v4);
  EXPECT_LE(plain.size(), 512u);
  EXPECT_EQ(At16(plain, 6), (512 - question) / 16);
  EXPECT_TRUE(plain[2] & 0x02);
  auto parsed = ParseResponse(plain, 9, "many.example", kTypeA);
  ASSERT_TRUE(parsed) << parsed.error().message;
  EXPECT_TRUE(parsed->truncated);
  EXPECT_EQ(parsed->records.size(), (512 - question) / 16);

  q.edns = true;
  q.qtype = kTypeAaaa;
  const std::pair<int, int> limits[] = {{4096, 1232}, {1232, 1232}, {700, 700}, {512, 512}};
  for (auto [advertised, limit] : limits) {
    q.edns_udp_size = static_cast<uint16_t>(advertised);
    auto answer = BuildAnswer(q, kNoError, v6);
    EXPECT_LE(answer.size(), size_t(limit)) << advertised;
    EXPECT_EQ(At16(answer, 6), (limit - question - 11) / 28) << advertised;
    EXPECT_TRUE(answer[2] & 0x02);
    EXPECT_EQ(At16(answer, 10), 1);
    EXPECT_EQ(At16(answer, answer.size() - 10), kTypeOpt);
  }

  q.edns_udp_size = 1232;
  auto fits = BuildAnswer(q, kNoError, std::span(v6).first(3));
  EXPECT_FALSE(fits[2] & 0x02);
  EXPECT_EQ(At16(fits, 6), 3);
}

TEST(DnsBuildAnswerTest, ExtendedRcodeGoesToOpt) {
  auto q = ParseQuery(kDigQuery);
  ASSERT_TRUE(q);
  auto answer = BuildAnswer(*q, 16, {});  // BADVERS
  EXPECT_EQ(answer[3] & 0x0F, 0);
  EXPECT_EQ(answer[answer.size() - 6], 1);  // the OPT ttl's high byte
}

TEST(DnsBuildAnswerTest, UnencodableNameGivesServFail) {
  Query q;
  q.id = 5;
  q.name = "a..b";
  auto answer = BuildAnswer(q, kNoError, {});
  EXPECT_EQ(answer, BuildHeaderOnly(5, kServFail));
}

TEST(DnsBuildHeaderOnlyTest, Layout) {
  EXPECT_EQ(BuildHeaderOnly(0x1234, kFormErr),
            (std::vector<uint8_t>{0x12, 0x34, 0x80, 0x81, 0, 0, 0, 0, 0, 0, 0, 0}));
}

TEST(DnsBuildQueryTest, LayoutAndRoundTrip) {
  auto query = BuildQuery(0xbeef, "Example.com.", kTypeAaaa);
  auto expected = Message()
                      .Header(0xbeef, 0x0100, 1, 0, 0, 1)
                      .Question("Example.com", kTypeAaaa)
                      .Opt(1232)
                      .bytes;
  EXPECT_EQ(query, expected);
  auto q = ParseQuery(query);
  ASSERT_TRUE(q) << q.error().message;
  EXPECT_EQ(q->name, "example.com");
  EXPECT_TRUE(q->recursion_desired);
  EXPECT_EQ(q->edns_udp_size, 1232);

  EXPECT_EQ(BuildQuery(1, "", kTypeA).size(), 12u + 1 + 4 + 11);
  EXPECT_TRUE(BuildQuery(1, "a..b", kTypeA).empty());
  EXPECT_TRUE(BuildQuery(1, ".a", kTypeA).empty());
  EXPECT_TRUE(BuildQuery(1, "a.b..", kTypeA).empty());
  EXPECT_TRUE(BuildQuery(1, std::string(64, 'a'), kTypeA).empty());
  std::string label(63, 'a');
  std::string longest = label + "." + label + "." + label + "." + std::string(61, 'b');
  EXPECT_FALSE(BuildQuery(1, longest, kTypeA).empty());
  EXPECT_TRUE(BuildQuery(1, longest + "b", kTypeA).empty());
}

// --- ParseResponse ---

// A response to BuildQuery(0x1111, "example.com", qtype) with `ancount` answers to follow.
Message Response(uint16_t ancount, uint16_t qtype = kTypeA, uint16_t flags = 0x8180) {
  return Message().Header(0x1111, flags, 1, ancount, 0, 0).Question("example.com", qtype);
}

TEST(DnsParseResponseTest, FollowsCnameChain) {
  auto m = Response(8)
               .A("other.example", {9, 9, 9, 9})
               .Cname("example.com", "A.Example.NET")
               .A("b.cdn.example", {192, 0, 2, 1}, 20)
               .A("b.cdn.example", V6("2001:db8::5"))
               .A("b.cdn.example", {192, 0, 2, 9}, 20, 3)  // class CH
               .Cname("a.example.net", "b.cdn.example")
               .A("example.com", {10, 0, 0, 1})  // beside a CNAME: ignored
               .A("B.cdn.example", {192, 0, 2, 2}, 30);
  auto r = ParseResponse(m.bytes, 0x1111, "example.com", kTypeA);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->cnames, (std::vector<std::string>{"a.example.net", "b.cdn.example"}));
  ASSERT_EQ(r->records.size(), 2u);
  EXPECT_EQ(r->records[0].address, make_address("192.0.2.1"));
  EXPECT_EQ(r->records[0].ttl, 20u);
  EXPECT_EQ(r->records[1].address, make_address("192.0.2.2"));
}

TEST(DnsParseResponseTest, CompressedNamesAndAaaa) {
  // example.com CNAME www.<example.com>; www.example.com AAAA, owners as pointers.
  auto m = Response(2, kTypeAaaa);
  m.Pointer(12).RecordTail(kTypeCname, kClassIn, 60, {3, 'w', 'w', 'w', 0xC0, 12});
  const uint16_t www = static_cast<uint16_t>(m.bytes.size() - 6);
  m.Pointer(www).RecordTail(kTypeAaaa, kClassIn, 60, V6("2001:db8::7"));
  m.Opt(1232);  // additional records are not read
  auto r = ParseResponse(m.bytes, 0x1111, "example.com", kTypeAaaa);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->cnames, std::vector<std::string>{"www.example.com"});
  ASSERT_EQ(r->records.size(), 1u);
  EXPECT_EQ(r->records[0].address, make_address("2001:db8::7"));
}

TEST(DnsParseResponseTest, RcodeAndTruncationArePassedOn) {
  auto r = ParseResponse(Response(0, kTypeA, 0x8183).bytes, 0x1111, "example.com", kTypeA);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->rcode, kNxDomain);
  EXPECT_FALSE(r->truncated);
  r = ParseResponse(Response(0, kTypeA, 0x8380 | 0x0200).bytes, 0x1111, "example.com", kTypeA);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->truncated);
}

TEST(DnsParseResponseTest, OtherTypesCollectNothing) {
  auto m = Response(2, kTypeTxt)
               .A("example.com", {1, 2, 3, 4})
               .Name("example.com")
               .RecordTail(kTypeTxt, kClassIn, 60, {1, 'x'});
  auto r = ParseResponse(m.bytes, 0x1111, "example.com", kTypeTxt);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->records.empty());
}

TEST(DnsParseResponseTest, ChainOfEightIsFollowedNineIsNot) {
  auto chain = [](int n) {
    auto m = Response(static_cast<uint16_t>(n + 1));
    std::string owner = "example.com";
    for (int i = 1; i <= n; ++i) {
      std::string target = "c" + std::to_string(i) + ".example";
      m.Cname(owner, target);
      owner = target;
    }
    return m.A(owner, {1, 2, 3, 4}).bytes;
  };
  auto r = ParseResponse(chain(8), 0x1111, "example.com", kTypeA);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->cnames.size(), 8u);
  EXPECT_EQ(r->records.size(), 1u);
  EXPECT_FALSE(ParseResponse(chain(9), 0x1111, "example.com", kTypeA));
}

TEST(DnsParseResponseTest, Rejects) {
  auto ok = Response(1).A("example.com", {1, 2, 3, 4}).bytes;
  ASSERT_TRUE(ParseResponse(ok, 0x1111, "example.com", kTypeA));
  struct Case {
    std::string_view what;
    std::vector<uint8_t> bytes;
    uint16_t id = 0x1111;
    std::string_view name = "example.com";
    uint16_t qtype = kTypeA;
  } cases[] = {
      {"wrong id", ok, 0x1112},
      {"wrong name", ok, 0x1111, "example.org"},
      {"wrong type", ok, 0x1111, "example.com", kTypeAaaa},
      {"not a response", Response(1, kTypeA, 0x0100).A("example.com", {1, 2, 3, 4}).bytes},
      {"wrong class",
       Message().Header(0x1111, 0x8180, 1, 0, 0, 0).Question("example.com", 1, 3).bytes},
      {"no question", Message().Header(0x1111, 0x8180, 0, 0, 0, 0).bytes},
      {"short", {0x11, 0x11, 0x81}},
      {"CNAME loop",
       Response(2).Cname("example.com", "a.example").Cname("a.example", "example.com").bytes},
      {"CNAME to itself", Response(1).Cname("example.com", "example.com").bytes},
      {"CNAME loop further on", Response(3)
                                    .Cname("example.com", "a.example")
                                    .Cname("a.example", "b.example")
                                    .Cname("b.example", "a.example")
                                    .bytes},
      {"two CNAMEs",
       Response(2).Cname("example.com", "a.example").Cname("example.com", "b.example").bytes},
      {"CNAME with trailing data",
       Response(1).Name("example.com").RecordTail(kTypeCname, kClassIn, 1, {1, 'a', 0, 0}).bytes},
      {"CNAME forward pointer",
       Response(1).Name("example.com").RecordTail(kTypeCname, kClassIn, 1, {0xC0, 0x50}).bytes},
      {"A of 5 bytes",
       Response(1).Name("example.com").RecordTail(kTypeA, kClassIn, 1, {1, 2, 3, 4, 5}).bytes},
      {"AAAA of 4 bytes",
       Response(1, kTypeAaaa)
           .Name("example.com")
           .RecordTail(kTypeAaaa, kClassIn, 1, {1, 2, 3, 4})
           .bytes,
       0x1111, "example.com", kTypeAaaa},
      {"answer runs past the message",
       [] {
         auto m = Response(1).A("example.com", {1, 2, 3, 4}).bytes;
         m.pop_back();
         return m;
       }()},
      {"missing answer", Response(2).A("example.com", {1, 2, 3, 4}).bytes},
      {"too long", std::vector<uint8_t>(65536, 0)},
  };
  for (const auto& c : cases) EXPECT_FALSE(ParseResponse(c.bytes, c.id, c.name, c.qtype)) << c.what;
}

TEST(DnsTypeNameTest, Names) {
  EXPECT_EQ(TypeName(kTypeA), "A");
  EXPECT_EQ(TypeName(kTypeAaaa), "AAAA");
  EXPECT_EQ(TypeName(kTypeCname), "CNAME");
  EXPECT_EQ(TypeName(kTypeTxt), "TXT");
  EXPECT_EQ(TypeName(65), "HTTPS");
  EXPECT_EQ(TypeName(64), "SVCB");
  EXPECT_EQ(TypeName(10), "NULL");
  EXPECT_EQ(TypeName(kTypeAny), "ANY");
  EXPECT_EQ(TypeName(kTypeOpt), "OPT");
  EXPECT_EQ(TypeName(99), "99");
}

}  // namespace
}  // namespace deskbox::egress::dns
