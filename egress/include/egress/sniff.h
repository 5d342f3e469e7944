#pragma once
// What a guest's TCP connection is about, from the first bytes it sent: the TLS ClientHello's SNI
// or the HTTP/1.x Host header. Sans-IO and bounded: the caller feeds everything received so far
// (at most kMaxSniffBytes) and gets kNeedMore until the answer is known. Untrusted input; fuzzed
// by tests/egress/sniff_fuzz.cc.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace deskbox::egress {

// A ClientHello is at most 16 KiB of handshake in practice (post-quantum key shares make ~1.8 KiB);
// HTTP request heads of browsers are a few KiB.
inline constexpr size_t kMaxSniffBytes = 16 * 1024 + 512;

enum class SniffKind {
  kNeedMore,   // not decidable from these bytes; feed more (the caller stops at kMaxSniffBytes)
  kTls,        // a complete TLS ClientHello; `name` is its SNI host_name, empty if it has none
  kHttp,       // a complete HTTP/1.x request head; `name` is its Host, empty if it has none
  kOther,      // neither TLS nor HTTP (plain TCP): decided by the original destination only
  kMalformed,  // looks like TLS/HTTP but breaks its rules (bad lengths, two Hosts, bad name, ...)
};

struct SniffResult {
  SniffKind kind = SniffKind::kNeedMore;
  std::string name;    // normalized with NormalizeName; may be an IP literal (no brackets)
  std::string detail;  // for kMalformed: what was wrong, for the audit log
};

SniffResult Sniff(std::span<const uint8_t> data);

// Lowercases, strips one trailing dot and, for "[v6]" forms, the brackets; accepts host names
// (labels of [a-z0-9_-], 1..63 bytes each, 253 bytes in all, no empty label) and IPv4/IPv6
// literals. nullopt for anything else (spaces, NULs, '%', "..", too long, ...).
std::optional<std::string> NormalizeName(std::string_view name);

// True when `name` (already normalized) is an IPv4 or IPv6 literal.
bool IsAddressLiteral(std::string_view name);

}  // namespace deskbox::egress
