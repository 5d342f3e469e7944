#include "recorder/mp4_fragments.h"

#include <fmt/format.h>

namespace deskbox::recorder {
namespace {

struct Box {
  uint64_t size = 0;  // 0: runs past what was given
  std::string type;
};

uint64_t Be(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

// The box at `at`: its type and size when all of it is within `bytes`; size 0 when it is cut.
std::expected<Box, Mp4Error> BoxAt(std::string_view bytes, uint64_t at) {
  uint64_t left = bytes.size() - at;
  if (left < 8) return Box{};
  Box box;
  box.type = std::string(bytes.substr(at + 4, 4));
  uint64_t size = Be(bytes, at, 4);
  uint64_t header = 8;
  if (size == 1) {  // 64-bit size follows the type
    if (left < 16) return Box{0, box.type};
    size = Be(bytes, at + 8, 8);
    header = 16;
  } else if (size == 0) {
    // "To the end of the file": a writer that died before it set the size.
    return Box{0, box.type};
  }
  if (size < header) return std::unexpected(Mp4Error{fmt::format("box '{}' at {} has size {}", box.type, at, size)});
  box.size = size <= left ? size : 0;
  return box;
}

}  // namespace

std::expected<Mp4Layout, Mp4Error> ScanFragments(std::string_view bytes) {
  Mp4Layout layout;
  uint64_t at = 0;
  bool have_ftyp = false, have_moov = false;
  uint64_t moof_end = 0;  // a moof waiting for its mdat
  while (at < bytes.size()) {
    auto box = BoxAt(bytes, at);
    if (!box) return std::unexpected(box.error());
    if (box->size == 0) break;  // cut: what came before is what counts
    const std::string& t = box->type;
    uint64_t end = at + box->size;
    if (!have_ftyp) {
      if (t != "ftyp") return std::unexpected(Mp4Error{"no 'ftyp' box at the start"});
      have_ftyp = true;
    } else if (!have_moov) {
      if (t == "moov") {
        have_moov = true;
        layout.header_length = end;
        layout.whole_length = end;
      } else if (t != "free" && t != "skip") {
        return std::unexpected(Mp4Error{fmt::format("'{}' before the 'moov' box", t)});
      }
    } else if (t == "moof") {
      if (moof_end) return std::unexpected(Mp4Error{fmt::format("'moof' at {} follows a 'moof' with no 'mdat'", at)});
      moof_end = end;
    } else if (t == "mdat") {
      if (!moof_end) return std::unexpected(Mp4Error{fmt::format("'mdat' at {} with no 'moof' before it", at)});
      moof_end = 0;
      ++layout.fragments;
      layout.whole_length = end;
    } else if (t == "mfra" && !moof_end) {
      // The random-access index a finished segment ends with.
      layout.whole_length = end;
      layout.finished = true;
    } else if (t != "free" && t != "skip" && t != "sidx" && t != "styp") {
      return std::unexpected(Mp4Error{fmt::format("unexpected box '{}' at {}", t, at)});
    }
    at = end;
  }
  if (!have_moov) return std::unexpected(Mp4Error{"no 'moov' box: nothing playable"});
  layout.complete = layout.whole_length == bytes.size();
  return layout;
}

}  // namespace deskbox::recorder
