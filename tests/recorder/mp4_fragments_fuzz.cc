// ScanFragments on arbitrary bytes: no crash, and what it reports stays within the input; a
// file cut back to whole_length scans again to the same fragments, complete.
//
// Random bytes rarely start with ftyp + moov, so half the inputs are read as a recipe instead:
// each 3 bytes name a box (ftyp, moov, moof, mdat, mfra, free, or an unknown one) and its size
// (a plain one, 64-bit, 0, or one that runs past the end), and the last byte where to cut.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "recorder/mp4_fragments.h"

namespace {

void Check(std::string_view bytes) {
  auto layout = deskbox::recorder::ScanFragments(bytes);
  if (!layout) return;
  if (layout->whole_length > bytes.size() || layout->header_length > layout->whole_length) __builtin_trap();
  auto again = deskbox::recorder::ScanFragments(bytes.substr(0, layout->whole_length));
  if (!again || !again->complete || again->fragments != layout->fragments) __builtin_trap();
}

std::string Built(const uint8_t* data, size_t size) {
  static constexpr const char* kTypes[] = {"ftyp", "moov", "moof", "mdat", "mfra", "free", "sidx", "trak"};
  std::string out;
  for (size_t i = 0; i + 3 <= size && out.size() < (1 << 20); i += 3) {
    std::string type = kTypes[data[i] % 8];
    uint32_t payload = (uint32_t{data[i + 1]} << 4) | (data[i + 2] & 0x0f);
    switch (data[i + 2] >> 6) {
      case 0: {  // 32-bit size
        uint32_t s = 8 + payload;
        out += std::string{char(s >> 24), char(s >> 16), char(s >> 8), char(s)} + type + std::string(payload, '\0');
        break;
      }
      case 1: {  // 64-bit size
        uint64_t s = 16 + payload;
        out += std::string{0, 0, 0, 1} + type;
        for (int b = 7; b >= 0; --b) out += char(s >> (8 * b));
        out += std::string(payload, '\0');
        break;
      }
      case 2:  // size 0: to the end
        out += std::string{0, 0, 0, 0} + type + std::string(payload, '\0');
        break;
      default: {  // claims more than follows
        uint32_t s = 8 + payload * 2 + 1;
        out += std::string{char(s >> 24), char(s >> 16), char(s >> 8), char(s)} + type + std::string(payload, '\0');
      }
    }
  }
  if (size % 3 && !out.empty()) out.resize(out.size() - data[size - 1] % std::min<size_t>(out.size(), 64));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 1)
    Check(std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  else
    Check(Built(data + 1, size - 1));
  return 0;
}
