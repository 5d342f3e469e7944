#pragma once
#include <array>
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <string_view>

namespace deskbox {

using Sha256Digest = std::array<uint8_t, 32>;

Sha256Digest Sha256(std::span<const uint8_t> data);
inline Sha256Digest Sha256(std::string_view s) {
  return Sha256(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
}
// Hashes a whole file, streaming; returns errno on failure.
std::expected<Sha256Digest, int> Sha256File(const std::string& path);
std::string ToHex(std::span<const uint8_t> bytes);

// Fills buf from the kernel CSPRNG (getrandom); aborts if the kernel cannot supply it.
void RandomBytes(std::span<uint8_t> buf);

}  // namespace deskbox
