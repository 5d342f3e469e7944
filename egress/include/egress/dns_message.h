#pragma once
// DNS messages (RFC 1035, EDNS0 RFC 6891), just what the egress DNS responder and the proxy's own
// resolver need: parse a guest's query, build the answer or the refusal, build a query to the
// upstream resolver and parse its response (following CNAMEs inside the message). Sans-IO and
// bounded: every length and compression pointer is checked, names are at most 255 bytes, pointers
// may only point backwards, CNAME chains are at most 8 long. Untrusted input from both sides;
// fuzzed by tests/egress/dns_fuzz.cc.
#include <boost/asio/ip/address.hpp>
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "egress/error.h"

namespace deskbox::egress::dns {

inline constexpr uint16_t kTypeA = 1, kTypeCname = 5, kTypeTxt = 16, kTypeAaaa = 28, kTypeOpt = 41,
                          kTypeAny = 255;
inline constexpr uint16_t kClassIn = 1;
inline constexpr uint8_t kNoError = 0, kFormErr = 1, kServFail = 2, kNxDomain = 3, kNotImp = 4,
                         kRefused = 5;
inline constexpr size_t kMaxUdpMessage = 4096;  // larger datagrams are not parsed

struct Query {
  uint16_t id = 0;
  bool recursion_desired = false;
  bool checking_disabled = false;
  std::string name;        // lowercased, no trailing dot ("" for the root)
  uint16_t qtype = 0;
  uint16_t qclass = 0;
  bool edns = false;       // an OPT record was present
  uint16_t edns_udp_size = 512;  // the client's advertised size (>= 512), if edns
};

// A guest's query: QR=0, opcode QUERY, exactly one question, no answer/authority records, at
// most one additional record which must be OPT. Anything else is an error naming the problem,
// kTruncated when the message ends early, else kMalformed (the responder answers FORMERR/NOTIMP
// when at least the header could be read: see HeaderId).
std::expected<Query, Error> ParseQuery(std::span<const uint8_t> message);

// The id of a message whose 12-byte header is present (to answer FORMERR to garbage), else nullopt
// semantics through expected. Responses (QR=1) are an error too: answering them could start an
// endless exchange with another responder.
std::expected<uint16_t, Error> HeaderId(std::span<const uint8_t> message);

struct Record {
  boost::asio::ip::address address;  // A → v4, AAAA → v6
  uint32_t ttl = 0;
};

// An answer to `q`: QR=1, RA=1, RD/CD and id copied, the question echoed, then `answers` as A or
// AAAA records (by their address family) owned by the question name (compressed to offset 12).
// If q.edns, an OPT record advertising 1232 bytes is added. The result never exceeds
// max(512, q.edns_udp_size capped at 1232) bytes: records that do not fit are left out and TC set.
std::vector<uint8_t> BuildAnswer(const Query& q, uint8_t rcode, std::span<const Record> answers);

// Answer with only a header (echoing q's id and flags) for messages too broken to echo: FORMERR.
std::vector<uint8_t> BuildHeaderOnly(uint16_t id, uint8_t rcode);

// A recursive query (RD=1) for `name` with an EDNS0 OPT record advertising 1232 bytes. Empty if
// `name` is no valid wire name (an empty label, a label over 63 bytes, over 255 bytes in all).
std::vector<uint8_t> BuildQuery(uint16_t id, std::string_view name, uint16_t qtype);

struct Response {
  uint8_t rcode = 0;
  bool truncated = false;
  std::vector<Record> records;  // A/AAAA of type `qtype` for `name` or its CNAME chain's end
  std::vector<std::string> cnames;  // the chain followed, in order (lowercased)
};

// The upstream resolver's answer to BuildQuery(id, name, qtype): checks QR=1, the id and that
// the question section echoes name/qtype/IN; records of other names, types or classes are
// ignored; CNAMEs are followed from `name` (at most 8).
std::expected<Response, Error> ParseResponse(std::span<const uint8_t> message, uint16_t id,
                                             std::string_view name, uint16_t qtype);

// "A", "AAAA", "TXT", ... or the number.
std::string TypeName(uint16_t qtype);

}  // namespace deskbox::egress::dns
