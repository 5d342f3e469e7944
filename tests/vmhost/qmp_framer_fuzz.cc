#include <cstddef>
#include <cstdint>
#include <string_view>

#include "vmhost/qmp.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  deskbox::vmhost::QmpFramer f;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  // Feed in uneven pieces so every split point of short inputs is exercised over time.
  size_t step = size ? (data[0] % 7) + 1 : 1;
  for (size_t i = 0; i < in.size(); i += step) {
    if (!f.Feed(in.substr(i, step))) return 0;
    for (;;) {
      auto n = f.Next();
      if (!n || !*n) break;
    }
  }
  return 0;
}
