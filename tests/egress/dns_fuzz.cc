// DNS messages come from guests (queries) and from the upstream resolver (responses): the parsers
// must never crash, and answers built for any parsed query must stay within the size limit and
// parse back as an answer to that query.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "egress/dns_message.h"

namespace {

namespace dns = deskbox::egress::dns;

uint16_t At16(std::span<const uint8_t> m, size_t at) {
  return static_cast<uint16_t>(m[at] << 8 | m[at + 1]);
}

const std::vector<dns::Record>& SomeRecords() {
  static const std::vector<dns::Record> records = [] {
    std::vector<dns::Record> r;
    for (uint32_t i = 0; i < 60; ++i) {
      r.push_back({boost::asio::ip::address_v4(0xc0000200 + i), i});
      boost::asio::ip::address_v6::bytes_type b{};
      b[0] = 0x20, b[1] = 0x01, b[15] = static_cast<uint8_t>(i);
      r.push_back({boost::asio::ip::address_v6(b), i});
    }
    return r;
  }();
  return records;
}

void CheckAnswer(const dns::Query& q, uint8_t rcode, std::span<const dns::Record> records) {
  auto answer = dns::BuildAnswer(q, rcode, records);
  size_t limit = q.edns ? std::max<size_t>(512, std::min<size_t>(q.edns_udp_size, 1232)) : 512;
  if (answer.size() > limit || answer.size() < 12) std::abort();
  if (At16(answer, 0) != q.id || !(answer[2] & 0x80) || (answer[2] & 0x78) != 0) std::abort();
  if (bool(answer[2] & 0x01) != q.recursion_desired || (answer[3] & 0x0F) != (rcode & 0x0F))
    std::abort();
  if (At16(answer, 4) != 1 || At16(answer, 8) != 0 || At16(answer, 10) != (q.edns ? 1 : 0))
    std::abort();
  size_t included = At16(answer, 6);
  if (included > records.size() || bool(answer[2] & 0x02) != (included < records.size()))
    std::abort();
  if (q.qclass != dns::kClassIn) return;
  auto parsed = dns::ParseResponse(answer, q.id, q.name, q.qtype);
  if (!parsed || parsed->rcode != (rcode & 0x0F) || !parsed->cnames.empty()) std::abort();
  size_t expected = 0;
  for (size_t i = 0; i < included; ++i) {
    bool v4 = records[i].address.is_v4();
    if ((q.qtype == dns::kTypeA && v4) || (q.qtype == dns::kTypeAaaa && !v4)) ++expected;
  }
  if (parsed->records.size() != expected) std::abort();
}

void CheckResponse(std::span<const uint8_t> message, uint16_t id, std::string_view name,
                   uint16_t qtype) {
  auto r = dns::ParseResponse(message, id, name, qtype);
  if (!r) return;
  if (r->cnames.size() > 8 || r->rcode > 15) std::abort();
  for (const auto& record : r->records)
    if (record.address.is_v4() != (qtype == dns::kTypeA)) std::abort();
}

void CheckQuery(const dns::Query& q, size_t variant) {
  if (q.edns_udp_size < 512 || q.name.size() > 253) std::abort();
  const auto& records = SomeRecords();
  CheckAnswer(q, dns::kNoError,
              std::span(records).first(std::min<size_t>(records.size(), variant % 8)));
  CheckAnswer(q, dns::kNoError, records);
  CheckAnswer(q, dns::kRefused, {});
  CheckAnswer(q, 16, std::span(records).first(3));
  // A query we would send upstream for this name parses back to the same name.
  auto again = dns::ParseQuery(dns::BuildQuery(q.id, q.name, q.qtype));
  if (!again || again->name != q.name || again->qtype != q.qtype) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> input(data, size);
  auto id = dns::HeaderId(input);
  if (id && (size < 12 || *id != At16(input, 0))) std::abort();

  if (auto q = dns::ParseQuery(input)) {
    if (!id || q->id != *id) std::abort();
    CheckQuery(*q, size);
  }

  if (size >= 2) CheckResponse(input, At16(input, 0), "example.com", dns::kTypeA);
  // The input as the answer section of a response to "example.com", to reach the CNAME logic.
  for (uint16_t qtype : {dns::kTypeA, dns::kTypeAaaa}) {
    const uint8_t ancount = size > 0 ? data[0] % 16 : 0;
    std::vector<uint8_t> response = {
        0x11, 0x11, 0x81, 0x80, 0,   1,   0,   ancount, 0,
        0,    0,    0,    7,    'e', 'x', 'a', 'm',     'p',
        'l',  'e',  3,    'c',  'o', 'm', 0,   0,       static_cast<uint8_t>(qtype),
        0,    1};
    response.insert(response.end(), data + std::min<size_t>(size, 1), data + size);
    CheckResponse(response, 0x1111, "Example.com.", qtype);
  }

  // A valid query derived from the input (its text as the name, its bytes as type, flags and EDNS
  // size), so that answers are built for many names and sizes even from random inputs.
  std::string_view text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 300));
  const uint8_t b0 = size > 0 ? data[0] : 0, b1 = size > 1 ? data[1] : 0;
  auto built = dns::BuildQuery(7, text, b0);
  if (!built.empty()) {
    if (b1 & 0x01) built[3] |= 0x10;  // CD
    if (b1 & 0x02) built[2] &= 0xFE;  // no RD
    if (b1 & 0x04) {
      built.erase(built.end() - 11, built.end());  // no OPT
      built[11] = 0;
    } else {
      built[built.size() - 8] = b1;  // the OPT's class: the advertised size
      built[built.size() - 7] = b0;
    }
    auto q = dns::ParseQuery(built);
    std::string lower(text);
    for (char& c : lower) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    if (lower.ends_with('.')) lower.pop_back();
    if (!q || q->name != lower || q->qtype != b0 || q->edns == bool(b1 & 0x04)) std::abort();
    CheckQuery(*q, size);
  }
  if (size >= 2 && dns::TypeName(At16(input, 0)).empty()) std::abort();
  return 0;
}
