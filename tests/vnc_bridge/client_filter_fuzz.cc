// A viewer is untrusted: whatever it sends, the filter must refuse it cleanly or pass on only
// whole messages, never crash, never hold more than a header. The input is split into chunks at
// the positions its first byte names; its second byte picks view-only or control.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "vnc_bridge/client_filter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  size_t chunk = 1 + data[0] % 97;
  deskbox::vnc_bridge::ClientFilter f(data[1] & 1);
  std::span<const uint8_t> rest(data + 2, size - 2);
  std::string out;
  // A valid handshake first half of the time, so that the fuzzer reaches the messages often.
  if (data[1] & 2) {
    static const char kStart[] = "RFB 003.008\n\x01\x00";
    if (!f.Feed(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(kStart), 14), out)) abort();
  }
  size_t fed = 0;
  while (!rest.empty()) {
    size_t n = std::min(chunk, rest.size());
    fed += n;  // a chunk that fails may still have passed its first, whole messages on
    if (!f.Feed(rest.subspan(0, n), out)) break;
    rest = rest.subspan(n);
    f.TakeCounts();
  }
  // The filter only ever passes on bytes it was given (the shared flag replaces one).
  if (out.size() > fed + 14) abort();
  return 0;
}
