// A guest's first bytes are untrusted: Sniff must never crash, and its answer must not depend on
// how the bytes were split across reads. NormalizeName must be idempotent and only ever return
// host names or address literals.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "egress/sniff.h"

namespace {

using deskbox::egress::IsAddressLiteral;
using deskbox::egress::kMaxSniffBytes;
using deskbox::egress::NormalizeName;
using deskbox::egress::Sniff;
using deskbox::egress::SniffKind;
using deskbox::egress::SniffResult;

void CheckName(std::string_view name) {
  auto again = NormalizeName(name);
  if (!again || *again != name) std::abort();
  if (name.size() > 253) std::abort();
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
              c == '_' || (c == ':' && IsAddressLiteral(name));
    if (!ok) std::abort();
  }
}

void CheckResult(const SniffResult& r) {
  if ((r.kind == SniffKind::kMalformed) != !r.detail.empty()) std::abort();
  if (r.kind != SniffKind::kTls && r.kind != SniffKind::kHttp && !r.name.empty()) std::abort();
  if (!r.name.empty()) CheckName(r.name);
}

// Once a prefix decides, more bytes never change the decision.
void SniffWithSplits(std::span<const uint8_t> input) {
  SniffResult full = Sniff(input);
  CheckResult(full);
  if (input.empty()) return;
  const size_t splits[] = {input[0] % input.size(), input.size() / 2, input.size() - 1,
                           input[input.size() - 1] * size_t{61} % input.size()};
  for (size_t n : splits) {
    SniffResult part = Sniff(input.first(n));
    CheckResult(part);
    if (part.kind == SniffKind::kNeedMore) continue;
    if (part.kind != full.kind || part.name != full.name || part.detail != full.detail)
      std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> input(data, std::min(size, kMaxSniffBytes));
  SniffWithSplits(input);

  // The same bytes as a ClientHello body in one record, and as HTTP header lines, so that mutated
  // inputs reach the inner parsers.
  std::span<const uint8_t> body = input.first(std::min<size_t>(input.size(), 4000));
  std::vector<uint8_t> tls = {0x16,
                              0x03,
                              0x01,
                              static_cast<uint8_t>((body.size() + 4) >> 8),
                              static_cast<uint8_t>(body.size() + 4),
                              0x01,
                              0x00,
                              static_cast<uint8_t>(body.size() >> 8),
                              static_cast<uint8_t>(body.size())};
  tls.insert(tls.end(), body.begin(), body.end());
  SniffWithSplits(tls);
  std::string http = "GET / HTTP/1.1\r\n";
  http.append(reinterpret_cast<const char*>(body.data()), body.size());
  http += "\r\n\r\n";
  SniffWithSplits({reinterpret_cast<const uint8_t*>(http.data()), http.size()});

  std::string_view text(reinterpret_cast<const char*>(data), std::min<size_t>(size, 300));
  if (auto name = NormalizeName(text)) CheckName(*name);
  IsAddressLiteral(text);
  return 0;
}
