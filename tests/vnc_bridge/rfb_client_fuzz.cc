// The guest's RFB server is hostile: whatever it sends, the mirror's client must refuse it
// cleanly or go on, never crash, never write outside its framebuffer, never allocate beyond the
// screen cap. The input is split into chunks at the positions its first byte names, so message
// boundaries fall everywhere; input is injected between chunks as an agent would.
#include <cstddef>
#include <cstdint>
#include <span>

#include "vnc_bridge/image.h"
#include "vnc_bridge/rfb_client.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  size_t chunk = 1 + data[0] % 64;
  std::span<const uint8_t> rest(data + 1, size - 1);
  deskbox::vnc_bridge::RfbClient c;
  // A valid start (a 16x8 screen), so that the fuzzer reaches the message parser often.
  static const uint8_t kStart[] = {
      'R', 'F', 'B', ' ', '0', '0', '3', '.', '0', '0', '8', '\n', 1, 1, 0, 0, 0, 0, 0, 16, 0,
      8,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,   0,    0, 0, 0, 0, 0, 0, 0, 0,  0};
  if (data[0] & 0x80) {
    if (!c.Feed(std::span<const uint8_t>(kStart, sizeof kStart))) return 0;
  }
  while (!rest.empty()) {
    size_t n = std::min(chunk, rest.size());
    if (!c.Feed(rest.subspan(0, n))) break;
    c.PointerEvent(rest[0], 60000, rest[0]);
    c.KeyEvent(true, rest[0]);
    c.TakeOutput();
    c.TakeUpdates();
    rest = rest.subspan(n);
  }
  if (c.ready()) {
    const auto& fb = c.framebuffer();
    deskbox::vnc_bridge::Render(fb, {}, fb.width / 2 + 1, fb.height / 2 + 1);
  }
  return 0;
}
