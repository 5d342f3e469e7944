#include "egress/dns_message.h"

#include <algorithm>
#include <optional>
#include <utility>

namespace deskbox::egress::dns {
namespace {

constexpr size_t kHeaderSize = 12;
constexpr size_t kMaxNameWire = 255;  // RFC 1035 §2.3.4, counting length bytes and the root
constexpr size_t kMaxLabel = 63;
constexpr int kMaxPointerJumps = 128;
constexpr int kMaxCnameHops = 8;
constexpr uint16_t kOurUdpSize = 1232;  // DNS flag day 2020: no IP fragmentation
constexpr size_t kMinUdpSize = 512;
constexpr size_t kMaxMessage = 65535;  // a response that came over TCP
constexpr uint16_t kQuestionPointer = 0xC000 | kHeaderSize;

// Header flag bits (RFC 1035 §4.1.1, RFC 4035 §3.2 for CD).
constexpr uint16_t kFlagQr = 0x8000, kFlagTc = 0x0200, kFlagRd = 0x0100, kFlagRa = 0x0080,
                   kFlagCd = 0x0010;
constexpr int kOpcodeShift = 11;
constexpr uint16_t kOpcodeMask = 0xF;
constexpr uint16_t kRcodeMask = 0xF;

constexpr size_t kOptRecordSize = 11;       // root name, type, class, ttl, rdlength
constexpr size_t kAddressRecordFixed = 12;  // pointer, type, class, ttl, rdlength

std::unexpected<Error> Malformed(std::string message) {
  return std::unexpected(Error{ErrorCode::kMalformed, std::move(message)});
}
std::unexpected<Error> Truncated(std::string message) {
  return std::unexpected(Error{ErrorCode::kTruncated, std::move(message)});
}
// `e` with `where` before its message ("question: label runs past the message").
std::unexpected<Error> In(std::string_view where, Error e) {
  return std::unexpected(Error{e.code, std::string(where) + e.message});
}

uint16_t Get16(std::span<const uint8_t> m, size_t at) {
  return static_cast<uint16_t>(m[at] << 8 | m[at + 1]);
}
uint32_t Get32(std::span<const uint8_t> m, size_t at) {
  return uint32_t{Get16(m, at)} << 16 | Get16(m, at + 2);
}

struct Header {
  uint16_t id, flags, qdcount, ancount, nscount, arcount;
  uint8_t opcode() const { return (flags >> kOpcodeShift) & kOpcodeMask; }
};

Header ReadHeader(std::span<const uint8_t> m) {
  return {Get16(m, 0), Get16(m, 2), Get16(m, 4), Get16(m, 6), Get16(m, 8), Get16(m, 10)};
}

char Lower(uint8_t c) {
  return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
}

// Reads the possibly compressed name at `pos` and advances `pos` past it (past the first pointer
// if there is one). Every pointer must point before the start of the stretch of labels it ends,
// so each jump goes strictly backwards and no loop is possible; labels are lowercased, and a '.'
// inside a label is refused so that the text form names exactly one wire name.
std::expected<std::string, Error> ReadName(std::span<const uint8_t> m, size_t& pos) {
  std::string name;
  size_t cursor = pos, segment_start = pos, wire_length = 1;
  int jumps = 0;
  std::optional<size_t> after_pointer;
  for (;;) {
    if (cursor >= m.size()) return Truncated("name runs past the message");
    uint8_t length = m[cursor];
    if ((length & 0xC0) == 0xC0) {
      if (cursor + 1 >= m.size()) return Truncated("compression pointer runs past the message");
      size_t target = Get16(m, cursor) & 0x3FFF;
      if (target >= segment_start) return Malformed("compression pointer does not point backwards");
      if (target < kHeaderSize) return Malformed("compression pointer into the header");
      if (++jumps > kMaxPointerJumps) return Malformed("too many compression pointers");
      if (!after_pointer) after_pointer = cursor + 2;
      cursor = segment_start = target;
      continue;
    }
    if (length & 0xC0) return Malformed("unknown label type");
    if (length == 0) {
      pos = after_pointer.value_or(cursor + 1);
      return name;
    }
    wire_length += length + 1;
    if (wire_length > kMaxNameWire) return Malformed("name longer than 255 bytes");
    if (cursor + 1 + length > m.size()) return Truncated("label runs past the message");
    if (!name.empty()) name += '.';
    for (size_t i = cursor + 1; i <= cursor + length; ++i) {
      if (m[i] == '.') return Malformed("label contains a dot");
      name += Lower(m[i]);
    }
    cursor += 1 + length;
  }
}

void Put16(std::vector<uint8_t>& out, uint16_t v) {
  out.push_back(static_cast<uint8_t>(v >> 8));
  out.push_back(static_cast<uint8_t>(v));
}
void Put32(std::vector<uint8_t>& out, uint32_t v) {
  Put16(out, static_cast<uint16_t>(v >> 16));
  Put16(out, static_cast<uint16_t>(v));
}

// Appends `name` (dotted text, one trailing dot tolerated, "" for the root) uncompressed;
// false, with `out` unchanged, if it is not a valid wire name.
bool PutName(std::vector<uint8_t>& out, std::string_view name) {
  if (name.ends_with('.')) name.remove_suffix(1);
  std::vector<uint8_t> wire;
  while (!name.empty()) {
    size_t dot = name.find('.');
    std::string_view label = name.substr(0, dot);
    if (label.empty() || label.size() > kMaxLabel) return false;
    wire.push_back(static_cast<uint8_t>(label.size()));
    wire.insert(wire.end(), label.begin(), label.end());
    if (dot == std::string_view::npos) break;
    name.remove_prefix(dot + 1);
    if (name.empty()) return false;  // "a..": an empty label before the stripped dot
  }
  wire.push_back(0);
  if (wire.size() > kMaxNameWire) return false;
  out.insert(out.end(), wire.begin(), wire.end());
  return true;
}

void PutHeader(std::vector<uint8_t>& out, const Header& h) {
  for (uint16_t v : {h.id, h.flags, h.qdcount, h.ancount, h.nscount, h.arcount}) Put16(out, v);
}

// OPT pseudo-record (RFC 6891 §6.1.2): class is our UDP size, ttl holds the extended rcode bits.
void PutOpt(std::vector<uint8_t>& out, uint8_t extended_rcode) {
  out.push_back(0);
  Put16(out, kTypeOpt);
  Put16(out, kOurUdpSize);
  Put32(out, uint32_t{extended_rcode} << 24);
  Put16(out, 0);
}

std::string Lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = Lower(static_cast<uint8_t>(c));
  return out;
}

// A resource record's fixed part, after its owner name.
struct RecordView {
  std::string owner;
  uint16_t type, rclass;
  uint32_t ttl;
  size_t rdata;  // offset in the message
  uint16_t rdlength;
};

std::expected<RecordView, Error> ReadRecord(std::span<const uint8_t> m, size_t& pos) {
  auto owner = ReadName(m, pos);
  if (!owner) return std::unexpected(std::move(owner.error()));
  if (m.size() - pos < 10) return Truncated("record header runs past the message");
  RecordView r{.owner = std::move(*owner),
               .type = Get16(m, pos),
               .rclass = Get16(m, pos + 2),
               .ttl = Get32(m, pos + 4),
               .rdata = pos + 10,
               .rdlength = Get16(m, pos + 8)};
  pos += 10;
  if (m.size() - pos < r.rdlength) return Truncated("record data runs past the message");
  pos += r.rdlength;
  return r;
}

}  // namespace

std::expected<uint16_t, Error> HeaderId(std::span<const uint8_t> message) {
  if (message.size() < kHeaderSize) return Truncated("message shorter than a DNS header");
  // Answering a response could start an endless exchange with another responder.
  if (Get16(message, 2) & kFlagQr) return Malformed("message is a response");
  return Get16(message, 0);
}

std::expected<Query, Error> ParseQuery(std::span<const uint8_t> message) {
  if (message.size() > kMaxUdpMessage) return Malformed("message longer than 4096 bytes");
  if (message.size() < kHeaderSize) return Truncated("message shorter than a DNS header");
  Header h = ReadHeader(message);
  if (h.flags & kFlagQr) return Malformed("message is a response");
  if (h.opcode() != 0) return Malformed("opcode " + std::to_string(h.opcode()) + " is not QUERY");
  if (h.qdcount != 1) return Malformed(std::to_string(h.qdcount) + " questions");
  if (h.ancount != 0 || h.nscount != 0) return Malformed("query with answer or authority records");
  if (h.arcount > 1) return Malformed("more than one additional record");

  Query q;
  q.id = h.id;
  q.recursion_desired = h.flags & kFlagRd;
  q.checking_disabled = h.flags & kFlagCd;
  size_t pos = kHeaderSize;
  auto name = ReadName(message, pos);
  if (!name) return In("question: ", std::move(name.error()));
  q.name = std::move(*name);
  if (message.size() - pos < 4) return Truncated("question runs past the message");
  q.qtype = Get16(message, pos);
  q.qclass = Get16(message, pos + 2);
  pos += 4;

  if (h.arcount == 1) {
    auto opt = ReadRecord(message, pos);
    if (!opt) return In("additional record: ", std::move(opt.error()));
    if (opt->type != kTypeOpt) return Malformed("additional record is not OPT");
    if (!opt->owner.empty()) return Malformed("OPT record not owned by the root");
    uint8_t version = (opt->ttl >> 16) & 0xFF;
    if (version != 0) return Malformed("EDNS version " + std::to_string(version));
    // Options are not used, but they must tile the record data exactly.
    for (size_t at = opt->rdata, end = opt->rdata + opt->rdlength; at < end;) {
      if (end - at < 4 || end - at - 4 < Get16(message, at + 2))
        return Malformed("EDNS option runs past its record");
      at += 4 + Get16(message, at + 2);
    }
    q.edns = true;
    q.edns_udp_size = std::max<uint16_t>(opt->rclass, kMinUdpSize);
  }
  if (pos != message.size()) return Malformed("trailing bytes after the last record");
  return q;
}

std::vector<uint8_t> BuildHeaderOnly(uint16_t id, uint8_t rcode) {
  std::vector<uint8_t> out;
  PutHeader(out, {id, static_cast<uint16_t>(kFlagQr | kFlagRa | (rcode & kRcodeMask)), 0, 0, 0, 0});
  return out;
}

std::vector<uint8_t> BuildAnswer(const Query& q, uint8_t rcode, std::span<const Record> answers) {
  size_t limit = kMinUdpSize;
  if (q.edns) limit = std::max<size_t>(kMinUdpSize, std::min(q.edns_udp_size, kOurUdpSize));

  std::vector<uint8_t> out;
  uint16_t flags = kFlagQr | kFlagRa | (rcode & kRcodeMask);
  if (q.recursion_desired) flags |= kFlagRd;
  if (q.checking_disabled) flags |= kFlagCd;
  PutHeader(out, {q.id, flags, 1, 0, 0, static_cast<uint16_t>(q.edns ? 1 : 0)});
  // ParseQuery's names always encode; any other caller's bad name gets a bare SERVFAIL.
  if (!PutName(out, q.name)) return BuildHeaderOnly(q.id, kServFail);
  Put16(out, q.qtype);
  Put16(out, q.qclass);

  const size_t reserved = q.edns ? kOptRecordSize : 0;
  uint16_t count = 0;
  bool truncated = false;
  for (const Record& r : answers) {
    bool v4 = r.address.is_v4();
    size_t rdlength = v4 ? 4 : 16;
    if (count == UINT16_MAX || out.size() + kAddressRecordFixed + rdlength + reserved > limit) {
      truncated = true;
      break;
    }
    Put16(out, kQuestionPointer);
    Put16(out, v4 ? kTypeA : kTypeAaaa);
    Put16(out, kClassIn);
    Put32(out, r.ttl);
    Put16(out, static_cast<uint16_t>(rdlength));
    if (v4) {
      auto bytes = r.address.to_v4().to_bytes();
      out.insert(out.end(), bytes.begin(), bytes.end());
    } else {
      auto bytes = r.address.to_v6().to_bytes();
      out.insert(out.end(), bytes.begin(), bytes.end());
    }
    ++count;
  }
  if (q.edns) PutOpt(out, rcode >> 4);
  if (truncated) out[2] |= kFlagTc >> 8;
  out[6] = static_cast<uint8_t>(count >> 8);
  out[7] = static_cast<uint8_t>(count);
  return out;
}

std::vector<uint8_t> BuildQuery(uint16_t id, std::string_view name, uint16_t qtype) {
  std::vector<uint8_t> out;
  PutHeader(out, {id, kFlagRd, 1, 0, 0, 1});
  if (!PutName(out, name)) return {};
  Put16(out, qtype);
  Put16(out, kClassIn);
  PutOpt(out, 0);
  return out;
}

std::expected<Response, Error> ParseResponse(std::span<const uint8_t> message, uint16_t id,
                                             std::string_view name, uint16_t qtype) {
  if (message.size() > kMaxMessage) return Malformed("message longer than 65535 bytes");
  if (message.size() < kHeaderSize) return Truncated("message shorter than a DNS header");
  Header h = ReadHeader(message);
  if (!(h.flags & kFlagQr)) return Malformed("message is not a response");
  if (h.id != id) return Malformed("response id does not match the query");
  if (h.opcode() != 0) return Malformed("response opcode is not QUERY");
  if (h.qdcount != 1) return Malformed("response does not echo exactly one question");

  std::string wanted = Lowercase(name);
  if (wanted.ends_with('.')) wanted.pop_back();
  size_t pos = kHeaderSize;
  auto qname = ReadName(message, pos);
  if (!qname) return In("question: ", std::move(qname.error()));
  if (message.size() - pos < 4) return Truncated("question runs past the message");
  if (*qname != wanted || Get16(message, pos) != qtype || Get16(message, pos + 2) != kClassIn)
    return Malformed("response question does not match the query");
  pos += 4;

  std::vector<RecordView> answers;
  answers.reserve(std::min<size_t>(h.ancount, message.size() / 11));
  for (uint16_t i = 0; i < h.ancount; ++i) {
    auto r = ReadRecord(message, pos);
    if (!r) return In("answer: ", std::move(r.error()));
    if (r->rclass == kClassIn) answers.push_back(std::move(*r));
  }

  Response response;
  response.rcode = h.flags & kRcodeMask;
  response.truncated = h.flags & kFlagTc;

  std::string current = wanted;
  for (;;) {
    const RecordView* cname = nullptr;
    for (const RecordView& r : answers) {
      if (r.type != kTypeCname || r.owner != current) continue;
      if (cname) return Malformed("two CNAMEs for " + current);
      cname = &r;
    }
    if (!cname) break;
    size_t at = cname->rdata;
    auto target = ReadName(message, at);
    if (!target) return In("CNAME: ", std::move(target.error()));
    if (at != cname->rdata + cname->rdlength) return Malformed("CNAME data is not one name");
    if (*target == wanted ||
        std::find(response.cnames.begin(), response.cnames.end(), *target) != response.cnames.end())
      return Malformed("CNAME loop at " + *target);
    if (response.cnames.size() == kMaxCnameHops) return Malformed("CNAME chain longer than 8");
    response.cnames.push_back(*target);
    current = std::move(*target);
  }

  if (qtype != kTypeA && qtype != kTypeAaaa) return response;
  const size_t size = qtype == kTypeA ? 4 : 16;
  for (const RecordView& r : answers) {
    if (r.type != qtype || r.owner != current) continue;
    if (r.rdlength != size) return Malformed(TypeName(qtype) + " record of wrong length");
    auto data = message.subspan(r.rdata, size);
    Record record;
    record.ttl = r.ttl;
    if (qtype == kTypeA) {
      boost::asio::ip::address_v4::bytes_type bytes;
      std::copy(data.begin(), data.end(), bytes.begin());
      record.address = boost::asio::ip::address_v4(bytes);
    } else {
      boost::asio::ip::address_v6::bytes_type bytes;
      std::copy(data.begin(), data.end(), bytes.begin());
      record.address = boost::asio::ip::address_v6(bytes);
    }
    response.records.push_back(record);
  }
  return response;
}

std::string TypeName(uint16_t qtype) {
  static constexpr std::pair<uint16_t, std::string_view> kNames[] = {
      {1, "A"},    {2, "NS"},    {5, "CNAME"},  {6, "SOA"},   {10, "NULL"},
      {12, "PTR"}, {15, "MX"},   {16, "TXT"},   {28, "AAAA"}, {33, "SRV"},
      {41, "OPT"}, {64, "SVCB"}, {65, "HTTPS"}, {255, "ANY"}};
  for (const auto& [type, name] : kNames)
    if (type == qtype) return std::string(name);
  return std::to_string(qtype);
}

}  // namespace deskbox::egress::dns
