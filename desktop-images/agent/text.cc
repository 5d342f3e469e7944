#include "agent/text.h"

#include <cstdint>

namespace deskbox::agent {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 if it is invalid.
size_t ValidSequenceLength(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xbf;  // allowed range of the second byte
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    len = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    len = 3;
    if (b0 == 0xe0) lo = 0xa0;  // overlong
    if (b0 == 0xed) hi = 0x9f;  // surrogates
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    len = 4;
    if (b0 == 0xf0) lo = 0x90;  // overlong
    if (b0 == 0xf4) hi = 0x8f;  // > U+10FFFF
  } else {
    return 0;
  }
  if (i + len > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < len; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return len;
}

bool SanitizeInPlace(std::string* text) {
  if (IsValidUtf8(*text)) return false;
  *text = SanitizeUtf8(*text);
  return true;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = ValidSequenceLength(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = ValidSequenceLength(text, i);
    if (n == 0) {
      out += "\xef\xbf\xbd";
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

bool SanitizeResponseText(::deskbox::agent::v1::Response& response) {
  bool changed = false;
  if (response.has_error()) changed |= SanitizeInPlace(response.mutable_error()->mutable_message());
  if (response.has_clipboard()) {
    changed |= SanitizeInPlace(response.mutable_clipboard()->mutable_text());
  }
  if (response.has_ready()) {
    changed |= SanitizeInPlace(response.mutable_ready()->mutable_chromium_version());
    changed |= SanitizeInPlace(response.mutable_ready()->mutable_kernel_release());
  }
  return changed;
}

std::string Abbreviate(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back up to a character boundary (never split a multi-byte sequence).
  while (cut > 0 && (static_cast<uint8_t>(text[cut]) & 0xc0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

}  // namespace deskbox::agent
