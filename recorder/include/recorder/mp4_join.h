#pragma once
// A run of recording segments served as ONE MP4 file (`recording.mp4`), without copying them:
// PlanJoin reads the segments' box headers and their small `moov` and `moof` boxes and returns
// a plan — the joined file as a list of pieces, each a byte range of a segment file or a few
// bytes held in memory — and ReadJoined reads any byte range of the joined file from it (HTTP
// Range).
//
// The joined file:
//   ftyp   the first segment's
//   moov   the first segment's, with the total duration in mvhd, tkhd, mdhd and mvex/mehd (added
//          when absent), so that a player shows the length; its stsd holds every distinct sample
//          entry of the joined segments (see "which segments join")
//   then, for each segment in order, its moof + mdat pairs: each moof rewritten (mfhd sequence
//   numbers continuous across segments; tfdt moved so that a segment starts where the one before
//   ended; tfhd made to name what differs from the joined trex defaults, e.g. its sample entry),
//   each mdat a range of the segment file (a size-0 "to the end" mdat gets its size written out).
//   A segment's sidx, mfra and free boxes are left out: their offsets would be wrong.
// Gaps between segments (a pause, a restart) are not kept: the timeline is continuous, and
// `segment_offset_ms` says where each segment's first sample is in it. A segment ends at its
// last sample's decode time plus that sample's duration.
//
// Seeking needs no index: served with HTTP Range, Chromium seeks in a joined file (its demuxer
// reads the moofs); served without, it cannot seek at all, in a lone segment either.
//
// Sizes: a rewritten moof keeps its size unless it must grow (a tfdt that is absent or whose new
// time does not fit version 0 becomes a version 1 tfdt; a tfhd gains fields). When it grows, every
// trun data_offset in it grows by as much, since with default-base-is-moof (what FFmpeg's
// fragments use) the data offset counts from the moof's first byte and the mdat now starts that
// much later. (FFmpeg writes version 1 tfdt, so segments it wrote keep their sizes.)
//
// Which segments join: the leading run whose `moov` agrees with the first one's on what cannot
// be rewritten per fragment — one video track, the same track ID and media timescale, the same
// codec family; a segment that differs there ends the run (`joined_inputs`, `stopped_because`),
// and the caller can serve the rest separately. A new sample entry (another screen size) joins
// only when the segment's first sample carries its own SPS and PPS: measured, ffmpeg and
// Chromium switch at the boundary then, and not otherwise (NewEntryPlays in mp4_join.cc;
// SegmentEncoder repeats them before every keyframe).
//
// Untrusted bytes: every size is checked before use against the input's `length`, a moov or moof
// over 4 MiB is refused, box nesting is at most 8 deep and a moov or moof at most 4096 boxes,
// 64-bit box sizes and size 0 ("to the end of the file") are read, and arithmetic on times is
// checked for overflow. Anything a recording segment never holds (more than one track, no mvex,
// samples in the moov, an explicit base_data_offset, a box running past `length`) is a JoinError
// naming the file and the byte offset (fuzzed: tests/recorder/mp4_join_fuzz.cc).
//
// Cost: PlanJoin reads three small pieces per fragment (two box headers and the moof) and the
// plan holds every rewritten moof (a few hundred bytes per fragment, one fragment a keyframe
// interval), never sample data. A plan is read-only once made: any number of threads may
// ReadJoined from it, each with its own JoinReader (FileJoinReader is not thread-safe).
#include <cstdint>
#include <expected>
#include <span>
#include <string>
#include <vector>

#include "common/unique_fd.h"

namespace deskbox::recorder {

struct JoinInput {
  std::string path;
  // Bytes of the file to use: its size when finished; for a live segment, the whole-fragment
  // prefix (Mp4Layout::whole_length from ScanFragments).
  uint64_t length = 0;
};

struct JoinError {
  std::string message;  // names the file and the byte offset
};

// One piece of the joined file: `length` bytes at `offset` of the joined file, either
// inputs[input] from `file_offset` (input >= 0) or `bytes` (input == -1).
struct JoinPiece {
  uint64_t offset = 0;
  uint64_t length = 0;
  int input = -1;
  uint64_t file_offset = 0;
  std::string bytes;
};

struct JoinedMp4 {
  uint64_t size = 0;              // bytes of the joined file
  std::vector<JoinPiece> pieces;  // in order, contiguous, covering [0, size)
  size_t joined_inputs = 0;       // inputs[0, joined_inputs) are in the file
  std::string stopped_because;    // why inputs[joined_inputs] could not join, when it could not
  // For each joined input: where its first sample is in the joined timeline (ms, rounded).
  std::vector<int64_t> segment_offset_ms;
  int64_t duration_ms = 0;
  uint32_t timescale = 0;       // the track's media timescale (the muxer's choice, e.g. 16000)
  uint64_t duration_units = 0;  // the duration in that timescale
  uint32_t sample_entries = 0;  // distinct sample entries in the joined stsd
};

// Where the inputs' bytes come from.
class JoinReader {
 public:
  virtual ~JoinReader() = default;
  // Exactly out.size() bytes of input `input` from `offset`, or an error.
  virtual std::expected<void, JoinError> Read(int input, uint64_t offset, std::span<char> out) = 0;
};

// Reads the inputs' files with pread, each opened on first use and kept open until destruction:
// one reader for a whole response keeps reading the same files even once they are unlinked.
class FileJoinReader : public JoinReader {
 public:
  explicit FileJoinReader(std::vector<JoinInput> inputs);
  std::expected<void, JoinError> Read(int input, uint64_t offset, std::span<char> out) override;

 private:
  std::vector<JoinInput> inputs_;
  std::vector<UniqueFd> fds_;
};

// Plans the join of `inputs` (at least one). `reader` serves the bytes; `inputs` name them in
// errors and bound them (`length`). An input that is sound but cannot follow the one before ends
// the run (`joined_inputs`; those after it are not read); a damaged one before that is an error.
std::expected<JoinedMp4, JoinError> PlanJoin(const std::vector<JoinInput>& inputs,
                                             JoinReader& reader);
std::expected<JoinedMp4, JoinError> PlanJoin(const std::vector<JoinInput>& inputs);

// Copies the joined file's bytes from `offset` into `out`: returns how many (less than out.size()
// only at the end of the file; 0 from `offset >= plan.size`). An error when a file is gone or
// shorter than planned. The second form opens the files for this one read.
std::expected<size_t, JoinError> ReadJoined(const JoinedMp4& plan, JoinReader& reader,
                                            uint64_t offset, std::span<char> out);
std::expected<size_t, JoinError> ReadJoined(const JoinedMp4& plan,
                                            const std::vector<JoinInput>& inputs, uint64_t offset,
                                            std::span<char> out);

}  // namespace deskbox::recorder
