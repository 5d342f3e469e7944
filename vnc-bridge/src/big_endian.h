#pragma once
// Big-endian integers out, as RFB and PNG both write them.
#include <cstdint>
#include <string>

namespace deskbox::vnc_bridge {

inline void Put16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v >> 8));
  s.push_back(static_cast<char>(v));
}

inline void Put32(std::string& s, uint32_t v) {
  Put16(s, static_cast<uint16_t>(v >> 16));
  Put16(s, static_cast<uint16_t>(v));
}

}  // namespace deskbox::vnc_bridge
