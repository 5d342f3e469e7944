// Fuzz target: arbitrary bytes, fed to FrameReader in splits chosen by the input itself, every
// payload parsed as a Request and as a Response. Checks the reader's invariants on the way.
#include <cstdint>
#include <cstdlib>
#include <span>

#include <google/protobuf/stubs/logging.h>

#include "desktop_images/agent_frame.h"

namespace di = ::deskbox::desktop_images;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Random strings are rarely UTF-8; do not print protobuf's complaint about each one.
  static const bool quiet = (google::protobuf::SetLogHandler(nullptr), true);
  (void)quiet;
  if (size == 0) return 0;
  // First byte: split seed; a small frame limit sometimes, so the "too large" path is reached
  // with small inputs too.
  const uint8_t seed = data[0];
  const size_t limit = (seed & 1) ? 64 : di::kMaxFrameBytes;
  std::span<const uint8_t> rest(data + 1, size - 1);
  di::FrameReader reader(limit);
  uint32_t state = seed * 2654435761u + 1;
  while (!rest.empty()) {
    state = state * 1103515245u + 12345u;
    const size_t piece_len = std::min<size_t>(rest.size(), 1 + (state >> 16) % 17);
    std::span<const uint8_t> piece = rest.first(piece_len);
    rest = rest.subspan(piece_len);
    while (!piece.empty()) {
      const size_t took = reader.Feed(piece);
      if (took > piece.size()) std::abort();
      piece = piece.subspan(took);
      if (reader.buffered_bytes() > limit + di::kFrameHeaderBytes) std::abort();
      auto next = reader.Next();
      if (!next) {
        if (!reader.failed() || reader.Feed(piece) != 0) std::abort();
        return 0;  // the channel would be closed here
      }
      if (!*next) {
        if (took == 0) std::abort();  // no progress without a frame or an error
        continue;
      }
      const std::string& payload = **next;
      if (payload.empty() || payload.size() > limit) std::abort();
      auto request = di::ParseRequest(payload);
      auto response = di::ParseResponse(payload);
      // Whatever parses must re-encode into a frame that reads back the same way.
      if (request && request->ByteSizeLong() > 0) {
        auto frame = di::EncodeFrame(*request);
        if (!frame) std::abort();
        di::FrameReader again;
        again.Feed(*frame);
        auto back = again.Next();
        if (!back || !*back || !di::ParseRequest(**back)) std::abort();
      }
      (void)response;
    }
  }
  return 0;
}
