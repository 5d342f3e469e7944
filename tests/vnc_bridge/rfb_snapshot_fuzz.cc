// The guest's RFB server is hostile: whatever it sends, the snapshot client must refuse it
// cleanly or finish, never crash, never allocate beyond the screen cap. The input is split into
// chunks at the positions its first bytes name, so message boundaries fall everywhere.
#include <cstddef>
#include <cstdint>
#include <span>

#include "vnc_bridge/rfb_snapshot.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  size_t chunk = 1 + data[0] % 64;
  std::span<const uint8_t> rest(data + 1, size - 1);
  deskbox::vnc_bridge::RfbSnapshotClient c;
  // A valid start, so that the fuzzer reaches the message parser often.
  static const uint8_t kStart[] = {'R', 'F', 'B', ' ', '0', '0', '3', '.', '0', '0', '8', '\n', 1, 1, 0, 0, 0, 0,
                                   0, 16, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (data[0] & 0x80) {
    if (!c.Feed(std::span<const uint8_t>(kStart, sizeof kStart))) return 0;
  }
  while (!rest.empty()) {
    size_t n = std::min(chunk, rest.size());
    if (!c.Feed(rest.subspan(0, n))) break;
    c.TakeOutput();
    rest = rest.subspan(n);
  }
  if (c.done()) deskbox::vnc_bridge::EncodePng(c.image());
  return 0;
}
