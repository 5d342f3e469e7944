#pragma once
// How much of a fragmented MP4 file is whole: the top-level boxes of an H.264 recording segment
// are `ftyp`, `moov` (no samples: empty_moov), then one `moof` + `mdat` pair per fragment.
// A segment whose writer died (deskboxd killed) ends in a partial box; cut back to
// WholeLength() it plays and reads without errors, losing only the unfinished fragment.
//
// A bounded scanner of untrusted bytes: it never reads past the buffer, never trusts a size to
// allocate, and rejects what a segment never holds (fuzzed: tests/recorder/mp4_fragments_fuzz.cc).
#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace deskbox::recorder {

struct Mp4Layout {
  uint64_t whole_length = 0;  // bytes up to the end of the last complete moof + mdat pair
  uint64_t header_length = 0;  // ftyp + moov
  uint32_t fragments = 0;      // complete moof + mdat pairs
  bool complete = false;       // nothing follows the last whole fragment (but an mfra index)
  bool finished = false;       // ends with the mfra index the muxer writes when it finishes: a
                               // file that is complete but not finished lost its writer between
                               // two fragments
};

struct Mp4Error {
  std::string message;
};

// `bytes`: a file's leading bytes (all of it, or as much as was read). Errors: no ftyp + moov at
// the start (nothing playable), or a box that breaks the layout (a size under 8, a fragment
// missing its mdat, an mdat before any moof).
std::expected<Mp4Layout, Mp4Error> ScanFragments(std::string_view bytes);

}  // namespace deskbox::recorder
