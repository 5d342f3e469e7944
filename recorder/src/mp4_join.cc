#include "recorder/mp4_join.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

namespace deskbox::recorder {
namespace {

constexpr uint64_t kMaxBoxInMemory = 4 << 20;  // a moov, moof or ftyp read whole
constexpr int kMaxDepth = 8;
constexpr size_t kMaxBoxes = 4096;  // in one moov or moof

// tfhd flags (ISO/IEC 14496-12 8.8.7)
constexpr uint32_t kBaseDataOffset = 0x000001, kSampleDescriptionIndex = 0x000002,
                   kDefaultDuration = 0x000008, kDefaultSize = 0x000010, kDefaultFlags = 0x000020,
                   kDefaultBaseIsMoof = 0x020000;
// trun flags (8.8.8)
constexpr uint32_t kDataOffset = 0x000001, kFirstSampleFlags = 0x000004, kSampleDuration = 0x000100,
                   kSampleSize = 0x000200, kSampleFlags = 0x000400, kSampleCto = 0x000800;

uint64_t Get(std::string_view b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}
void Put(std::string& b, size_t at, uint64_t v, size_t n) {
  for (size_t i = 0; i < n; ++i) b[at + i] = static_cast<char>(v >> (8 * (n - 1 - i)));
}
void Append(std::string& b, uint64_t v, size_t n) {
  b.resize(b.size() + n);
  Put(b, b.size() - n, v, n);
}

// A box held in memory: a container's children parsed, any other box's payload kept as bytes.
struct Box {
  std::string type;
  std::string data;  // a leaf's payload; a container's bytes before its children (stsd: 8)
  std::vector<Box> children;
  bool container = false;

  uint64_t Size() const {
    uint64_t n = data.size();
    if (container)
      for (const Box& c : children) n += c.Size();
    return n + 8 > UINT32_MAX ? n + 16 : n + 8;
  }
  void Write(std::string& out) const {
    uint64_t size = Size();
    if (size > UINT32_MAX) {
      Append(out, 1, 4);
      out += type;
      Append(out, size, 8);
    } else {
      Append(out, size, 4);
      out += type;
    }
    out += data;
    if (container)
      for (const Box& c : children) c.Write(out);
  }
  Box* Child(std::string_view t) {
    for (Box& c : children)
      if (c.type == t) return &c;
    return nullptr;
  }
  size_t Count(std::string_view t) const {
    return static_cast<size_t>(
        std::count_if(children.begin(), children.end(), [&](const Box& c) { return c.type == t; }));
  }
  uint8_t version() const { return data.empty() ? 0 : static_cast<uint8_t>(data[0]); }
  uint32_t flags() const { return data.size() < 4 ? 0 : static_cast<uint32_t>(Get(data, 1, 3)); }
};

struct BoxHeader {
  std::string type;
  uint64_t size = 0;    // the whole box
  uint64_t header = 8;  // 8, or 16 with a 64-bit size
  bool to_end = false;  // size 0: to the end of the file
};

// The header of the box at the start of `b`, which has `left` bytes to the end of what holds it
// (b may be shorter: only the header is needed). Size 0 runs to the end (`left`).
std::expected<BoxHeader, std::string> ParseHeader(std::string_view b, uint64_t left) {
  if (b.size() < 8 || left < 8) return std::unexpected("a box cut short");
  BoxHeader h;
  h.type = std::string(b.substr(4, 4));
  h.size = Get(b, 0, 4);
  if (h.size == 1) {
    if (b.size() < 16 || left < 16)
      return std::unexpected(fmt::format("box '{}' cut short", h.type));
    h.size = Get(b, 8, 8);
    h.header = 16;
  } else if (h.size == 0) {
    h.size = left;
    h.to_end = true;
  }
  if (h.size < h.header)
    return std::unexpected(fmt::format("box '{}' has size {}", h.type, h.size));
  if (h.size > left)
    return std::unexpected(fmt::format("box '{}' of {} bytes runs past the end ({} bytes left)",
                                       h.type, h.size, left));
  return h;
}

bool IsContainer(std::string_view t) {
  return t == "moov" || t == "trak" || t == "mdia" || t == "minf" || t == "stbl" || t == "stsd" ||
         t == "mvex" || t == "moof" || t == "traf";
}

struct Parse {
  size_t boxes = 0;
  std::string error;  // "... at <file offset>"

  bool Fail(uint64_t at, std::string what) {
    error = fmt::format("{} at {}", what, at);
    return false;
  }
  // The boxes in `b` (at `at` of the file) into `out`.
  bool Children(std::string_view b, uint64_t at, int depth, std::vector<Box>& out) {
    size_t pos = 0;
    while (pos < b.size()) {
      auto h = ParseHeader(b.substr(pos), b.size() - pos);
      if (!h) return Fail(at + pos, h.error());
      if (++boxes > kMaxBoxes) return Fail(at + pos, "too many boxes");
      Box box;
      box.type = h->type;
      std::string_view payload = b.substr(pos + h->header, h->size - h->header);
      uint64_t payload_at = at + pos + h->header;
      if (IsContainer(box.type)) {
        if (depth + 1 > kMaxDepth) return Fail(at + pos, "boxes nested too deep");
        box.container = true;
        size_t prefix = box.type == "stsd" ? 8 : 0;  // version, flags, entry count
        if (payload.size() < prefix) return Fail(at + pos, "'stsd' cut short");
        box.data = std::string(payload.substr(0, prefix));
        if (!Children(payload.substr(prefix), payload_at + prefix, depth + 1, box.children))
          return false;
        if (box.type == "stsd" && Get(box.data, 4, 4) != box.children.size())
          return Fail(at + pos, fmt::format("'stsd' says {} entries and holds {}",
                                            Get(box.data, 4, 4), box.children.size()));
      } else {
        box.data = std::string(payload);
      }
      out.push_back(std::move(box));
      pos += h->size;
    }
    return true;
  }
};

// The fields of a full box that has creation and modification times (32 or 64 bits by version),
// then `middle` bytes, then a duration (32 or 64 bits): mvhd and mdhd (middle: the timescale),
// tkhd (middle: track_ID, reserved).
struct TimedLayout {
  size_t times, duration_at, duration_size;
};
std::optional<TimedLayout> Layout(const Box& b, size_t middle) {
  bool v1 = b.version() == 1;
  if (b.version() > 1) return std::nullopt;
  TimedLayout l{v1 ? 8u : 4u, 4 + (v1 ? 16 : 8) + middle, v1 ? 8u : 4u};
  if (b.data.size() < l.duration_at + l.duration_size) return std::nullopt;
  return l;
}
// Sets the duration; a version 0 box whose new duration needs 64 bits becomes version 1.
void SetDuration(Box& b, size_t middle, uint64_t duration) {
  TimedLayout l = *Layout(b, middle);
  if (l.duration_size == 4 && duration > UINT32_MAX) {
    std::string v1 = b.data.substr(0, 4);
    v1[0] = 1;
    Append(v1, Get(b.data, 4, 4), 8);
    Append(v1, Get(b.data, 8, 4), 8);
    v1 += b.data.substr(12, middle);
    Append(v1, duration, 8);
    v1 += b.data.substr(l.duration_at + 4);
    b.data = std::move(v1);
    return;
  }
  Put(b.data, l.duration_at, duration, l.duration_size);
}

struct Defaults {
  uint32_t description = 1, duration = 0, size = 0, flags = 0;
};

// What a segment's moov says about its one track.
struct Track {
  uint32_t track_id = 0, timescale = 0;
  std::string handler;
  std::vector<std::string> entries;  // the stsd's sample entries, each a whole box
  std::vector<Box> entry_boxes;      // the same, parsed
  Defaults trex;
};

struct Tfhd {
  uint32_t flags = 0, track_id = 0;
  Defaults d;  // the fields present (per flags)
};

std::expected<Tfhd, std::string> ReadTfhd(const Box& b) {
  Tfhd t;
  t.flags = b.flags();
  size_t need = 8 + (t.flags & kBaseDataOffset ? 8 : 0);
  for (uint32_t f : {kSampleDescriptionIndex, kDefaultDuration, kDefaultSize, kDefaultFlags})
    if (t.flags & f) need += 4;
  if (b.version() != 0 || b.data.size() != need)
    return std::unexpected("'tfhd' of the wrong size for its flags");
  if (t.flags & kBaseDataOffset)
    return std::unexpected("'tfhd' with an explicit base_data_offset (unsupported)");
  t.track_id = static_cast<uint32_t>(Get(b.data, 4, 4));
  size_t at = 8;
  auto next = [&](uint32_t flag, uint32_t& v) {
    if (t.flags & flag) v = static_cast<uint32_t>(Get(b.data, at, 4)), at += 4;
  };
  next(kSampleDescriptionIndex, t.d.description);
  next(kDefaultDuration, t.d.duration);
  next(kDefaultSize, t.d.size);
  next(kDefaultFlags, t.d.flags);
  return t;
}

std::string WriteTfhd(const Tfhd& t) {
  std::string d;
  Append(d, t.flags, 4);  // version 0
  Append(d, t.track_id, 4);
  if (t.flags & kSampleDescriptionIndex) Append(d, t.d.description, 4);
  if (t.flags & kDefaultDuration) Append(d, t.d.duration, 4);
  if (t.flags & kDefaultSize) Append(d, t.d.size, 4);
  if (t.flags & kDefaultFlags) Append(d, t.d.flags, 4);
  return d;
}

struct Trun {
  uint64_t count = 0, duration = 0, bytes = 0;
  uint64_t first_size = 0;  // the first sample's bytes
  std::optional<int32_t> data_offset;
};

std::expected<Trun, std::string> ReadTrun(const Box& b, const Defaults& d) {
  if (b.data.size() < 8 || b.version() > 1)
    return std::unexpected("'trun' cut short or of an unknown version");
  uint32_t flags = b.flags();
  Trun t;
  t.count = Get(b.data, 4, 4);
  size_t at = 8;
  if (flags & kDataOffset) {
    if (b.data.size() < at + 4) return std::unexpected("'trun' cut short");
    t.data_offset = static_cast<int32_t>(Get(b.data, at, 4));
    at += 4;
  }
  if (flags & kFirstSampleFlags) at += 4;
  uint64_t entry = 0;
  for (uint32_t f : {kSampleDuration, kSampleSize, kSampleFlags, kSampleCto})
    if (flags & f) entry += 4;
  if (b.data.size() != at + t.count * entry)  // count < 2^32, entry <= 16: no overflow
    return std::unexpected(
        fmt::format("'trun' of {} bytes for {} samples", b.data.size(), t.count));
  if (!(flags & kSampleDuration)) t.duration = t.count * d.duration;
  if (!(flags & kSampleSize)) t.bytes = t.count * d.size;
  t.first_size = t.count && (flags & kSampleSize)
                     ? Get(b.data, at + (flags & kSampleDuration ? 4 : 0), 4)
                     : d.size;
  if (flags & (kSampleDuration | kSampleSize)) {
    for (uint64_t i = 0; i < t.count; ++i, at += entry) {
      size_t f = at;
      if (flags & kSampleDuration) t.duration += Get(b.data, f, 4), f += 4;
      if (flags & kSampleSize) t.bytes += Get(b.data, f, 4);
    }
  }
  return t;
}

// The bytes of an H.264 sample's NAL unit lengths (avcC lengthSizeMinusOne + 1), 0 when `entry`
// is not an H.264 sample entry with an avcC.
int NalLengthSize(const Box& entry) {
  if (entry.type != "avc1" && entry.type != "avc3") return 0;
  // The VisualSampleEntry fields before the entry's own boxes (14496-12 12.1.3).
  constexpr size_t kVisualSampleEntry = 78;
  if (entry.data.size() < kVisualSampleEntry) return 0;
  Parse p;
  std::vector<Box> boxes;
  if (!p.Children(std::string_view(entry.data).substr(kVisualSampleEntry), 0, 0, boxes)) return 0;
  for (const Box& b : boxes)
    if (b.type == "avcC" && b.data.size() >= 5 && (b.data[4] & 3) != 2) return (b.data[4] & 3) + 1;
  return 0;
}

// Whether an H.264 sample (its first bytes) carries an SPS and a PPS before its first slice: a
// decoder then takes the new parameter sets from the stream itself.
bool HasParameterSets(std::string_view sample, int length_size) {
  bool sps = false, pps = false;
  for (size_t at = 0; at + length_size < sample.size();) {
    uint64_t n = Get(sample, at, length_size);
    int type = sample[at + length_size] & 0x1f;
    if (type >= 1 && type <= 5) break;  // a slice
    sps |= type == 7;
    pps |= type == 8;
    if (n > sample.size()) break;
    at += length_size + n;
  }
  return sps && pps;
}

// Where a trun's data_offset sits in its payload.
constexpr size_t kTrunDataOffsetAt = 8;

uint64_t Rescale(uint64_t v, uint64_t to, uint64_t from, bool round_up) {
  unsigned __int128 n = static_cast<unsigned __int128>(v) * to + (round_up ? from - 1 : from / 2);
  n /= from;
  return n > std::numeric_limits<uint64_t>::max() ? std::numeric_limits<uint64_t>::max()
                                                  : static_cast<uint64_t>(n);
}

// Media time in ms (rounded; past int64's range, its maximum).
int64_t Ms(uint64_t units, uint32_t timescale) {
  return static_cast<int64_t>(
      std::min<uint64_t>(Rescale(units, 1000, timescale, false), INT64_MAX));
}

class Planner {
 public:
  Planner(const std::vector<JoinInput>& inputs, JoinReader& reader)
      : inputs_(inputs), reader_(reader) {}

  std::expected<JoinedMp4, JoinError> Run() {
    if (inputs_.empty()) return std::unexpected(JoinError{"no segments to join"});
    for (size_t i = 0; i < inputs_.size(); ++i) {
      auto joined = Input(static_cast<int>(i));
      if (!joined) return std::unexpected(joined.error());
      if (!*joined) break;
      plan_.joined_inputs = i + 1;
    }
    return Finish();
  }

 private:
  std::unexpected<JoinError> Fail(uint64_t at, std::string_view what) const {
    return std::unexpected(
        JoinError{fmt::format("{}: {} at {}", inputs_[current_].path, what, at)});
  }
  std::unexpected<JoinError> Fail(std::string_view what_at) const {
    return std::unexpected(JoinError{fmt::format("{}: {}", inputs_[current_].path, what_at)});
  }

  std::expected<std::string, JoinError> Read(uint64_t at, uint64_t n) {
    std::string buf(n, '\0');
    if (auto r = reader_.Read(current_, at, buf); !r) return std::unexpected(r.error());
    return buf;
  }

  // The header of the top-level box at `at`, and up to 16 bytes from there.
  std::expected<BoxHeader, JoinError> HeaderAt(uint64_t at) {
    uint64_t left = inputs_[current_].length - at;
    auto b = Read(at, std::min<uint64_t>(left, 16));
    if (!b) return std::unexpected(b.error());
    auto h = ParseHeader(*b, left);
    if (!h) return Fail(at, h.error());
    return *h;
  }

  // The box at `at` read and parsed (a moov or moof).
  std::expected<Box, JoinError> ReadBox(uint64_t at, const BoxHeader& h) {
    if (h.size > kMaxBoxInMemory)
      return Fail(at, fmt::format("'{}' of {} bytes is too large", h.type, h.size));
    auto bytes = Read(at, h.size);
    if (!bytes) return std::unexpected(bytes.error());
    Parse p;
    std::vector<Box> boxes;
    if (!p.Children(*bytes, at, 0, boxes)) return Fail(p.error);
    return std::move(boxes.front());
  }

  // One input: false when it cannot join the ones before (plan_.stopped_because says why).
  std::expected<bool, JoinError> Input(int index) {
    current_ = index;
    const JoinInput& in = inputs_[index];
    uint64_t at = 0;
    auto ftyp = HeaderAt(0);
    if (!ftyp) return std::unexpected(ftyp.error());
    if (ftyp->type != "ftyp") return Fail(0, "no 'ftyp' box");
    if (index == 0) {
      if (ftyp->size > kMaxBoxInMemory) return Fail(0, "'ftyp' too large");
      auto b = Read(0, ftyp->size);
      if (!b) return std::unexpected(b.error());
      ftyp_ = std::move(*b);
    }
    at = ftyp->size;
    // Up to the moov.
    std::optional<Box> moov;
    uint64_t moov_at = 0;
    while (!moov) {
      if (at >= in.length) return Fail(at, "no 'moov' box");
      auto h = HeaderAt(at);
      if (!h) return std::unexpected(h.error());
      if (h->type == "moov") {
        auto b = ReadBox(at, *h);
        if (!b) return std::unexpected(b.error());
        moov = std::move(*b);
        moov_at = at;
      } else if (h->type != "free" && h->type != "skip") {
        return Fail(at, fmt::format("'{}' before the 'moov' box", h->type));
      }
      at += h->size;
    }
    auto track = ReadTrack(*moov, moov_at);
    if (!track) return std::unexpected(track.error());
    if (index == 0) {
      moov_ = std::move(*moov);
      track_ = *track;
    } else if (auto why = Incompatible(*track); !why.empty()) {
      plan_.stopped_because = fmt::format("{}: {}", in.path, why);
      return false;
    }
    const size_t pieces = plan_.pieces.size(), entries = entries_.size();
    const uint32_t sequence = sequence_;
    // Its sample entries in the joined stsd.
    std::vector<uint32_t> entry_index;
    for (size_t e = 0; e < track->entries.size(); ++e) {
      auto it = std::find(entries_.begin(), entries_.end(), track->entries[e]);
      if (it == entries_.end()) {
        it = entries_.insert(entries_.end(), track->entries[e]);
        entry_boxes_.push_back(track->entry_boxes[e]);
      }
      entry_index.push_back(static_cast<uint32_t>(it - entries_.begin() + 1));
    }
    // (A first segment with two equal entries: the joined trex names the one kept.)
    if (index == 0) track_.trex.description = entry_index[track_.trex.description - 1];
    // The fragments.
    first_time_.reset();
    running_ = 0;
    segment_end_ = 0;
    at_boundary_ = index > 0;
    uint64_t base = end_;
    while (at < in.length) {
      auto h = HeaderAt(at);
      if (!h) return std::unexpected(h.error());
      if (h->type == "moof") {
        auto r = Fragment(at, *h, *track, entry_index, base);
        if (!r) return std::unexpected(r.error());
        if (!*r) {  // it cannot join: undo what it added
          plan_.pieces.resize(pieces);
          entries_.resize(entries);
          entry_boxes_.resize(entries);
          sequence_ = sequence;
          return false;
        }
        at = **r;
        continue;
      }
      if (h->type == "mdat") return Fail(at, "'mdat' with no 'moof' before it");
      if (h->type != "free" && h->type != "skip" && h->type != "sidx" && h->type != "styp" &&
          h->type != "mfra")
        return Fail(at, fmt::format("unexpected box '{}'", h->type));
      at += h->size;  // an index or padding: not carried over (its offsets would be wrong)
    }
    plan_.segment_offset_ms.push_back(Ms(base, track_.timescale));
    end_ = base + segment_end_;
    return true;
  }

  std::expected<Track, JoinError> ReadTrack(Box& moov, uint64_t at) {
    auto fail = [&](std::string what) { return Fail(at, fmt::format("'moov' {}", what)); };
    if (moov.Count("trak") != 1)
      return fail(fmt::format("has {} tracks (one is joined)", moov.Count("trak")));
    Box* mvhd = moov.Child("mvhd");
    Box* trak = moov.Child("trak");
    Box* mvex = moov.Child("mvex");
    if (!mvhd || !Layout(*mvhd, 4)) return fail("has no valid 'mvhd'");
    if (!mvex) return fail("has no 'mvex': not a fragmented MP4");
    Box* tkhd = trak->Child("tkhd");
    Box* mdia = trak->Child("mdia");
    if (!tkhd || !Layout(*tkhd, 8)) return fail("has no valid 'tkhd'");
    Box* mdhd = mdia ? mdia->Child("mdhd") : nullptr;
    Box* hdlr = mdia ? mdia->Child("hdlr") : nullptr;
    Box* minf = mdia ? mdia->Child("minf") : nullptr;
    Box* stbl = minf ? minf->Child("stbl") : nullptr;
    Box* stsd = stbl ? stbl->Child("stsd") : nullptr;
    if (!mdhd || !Layout(*mdhd, 4)) return fail("has no valid 'mdhd'");
    if (!hdlr || hdlr->data.size() < 12) return fail("has no valid 'hdlr'");
    if (!stsd || stsd->children.empty()) return fail("has no sample entries");
    for (const char* t : {"stsz", "stz2"})
      if (Box* b = stbl->Child(t); b && (b->data.size() < 12 || Get(b->data, 8, 4) != 0))
        return fail("holds samples (not an empty moov)");
    Track t;
    auto tk = *Layout(*tkhd, 8);
    t.track_id = static_cast<uint32_t>(Get(tkhd->data, 4 + 2 * tk.times, 4));
    auto md = *Layout(*mdhd, 4);
    t.timescale = static_cast<uint32_t>(Get(mdhd->data, 4 + 2 * md.times, 4));
    if (t.timescale == 0 || Get(mvhd->data, 4 + 2 * Layout(*mvhd, 4)->times, 4) == 0)
      return fail("has timescale 0");
    t.handler = hdlr->data.substr(8, 4);
    for (const Box& e : stsd->children) {
      std::string bytes;
      e.Write(bytes);
      t.entries.push_back(std::move(bytes));
      t.entry_boxes.push_back(e);
    }
    size_t trexes = 0;
    for (const Box& b : mvex->children) {
      if (b.type != "trex") continue;
      ++trexes;
      if (b.data.size() != 24) return fail("has a 'trex' of the wrong size");
      if (Get(b.data, 4, 4) != t.track_id) return fail("has a 'trex' for another track");
      t.trex = {static_cast<uint32_t>(Get(b.data, 8, 4)), static_cast<uint32_t>(Get(b.data, 12, 4)),
                static_cast<uint32_t>(Get(b.data, 16, 4)),
                static_cast<uint32_t>(Get(b.data, 20, 4))};
    }
    if (trexes != 1) return fail("has no 'trex' for its track");
    if (t.trex.description == 0 || t.trex.description > t.entries.size())
      return fail("has a 'trex' naming a sample entry it lacks");
    return t;
  }

  // Why `t` cannot join the first segment's track; "" when it can.
  std::string Incompatible(const Track& t) const {
    if (t.track_id != track_.track_id)
      return fmt::format("track ID {}, not {}", t.track_id, track_.track_id);
    if (t.timescale != track_.timescale)
      return fmt::format("timescale {}, not {}", t.timescale, track_.timescale);
    if (t.handler != track_.handler)
      return fmt::format("handler '{}', not '{}'", t.handler, track_.handler);
    for (const std::string& e : t.entries)
      if (e.substr(4, 4) != track_.entries.front().substr(4, 4))
        return fmt::format("sample entry '{}', not '{}'", e.substr(4, 4),
                           track_.entries.front().substr(4, 4));
    return "";
  }

  // The moof at `at` and its mdat: their pieces; returns where the next box starts, or nothing
  // when the segment cannot join (plan_.stopped_because says why).
  std::expected<std::optional<uint64_t>, JoinError> Fragment(
      uint64_t at, const BoxHeader& h, const Track& track, const std::vector<uint32_t>& entry_index,
      uint64_t base) {
    const JoinInput& in = inputs_[current_];
    if (h.size > kMaxBoxInMemory)
      return Fail(at, fmt::format("'moof' of {} bytes is too large", h.size));
    uint64_t mdat_at = at + h.size;
    if (mdat_at >= in.length) return Fail(at, "'moof' with no 'mdat' after it");
    auto mdat = HeaderAt(mdat_at);
    if (!mdat) return std::unexpected(mdat.error());
    if (mdat->type != "mdat")
      return Fail(mdat_at, fmt::format("'{}' after a 'moof', not 'mdat'", mdat->type));
    auto moof = ReadBox(at, h);
    if (!moof) return std::unexpected(moof.error());
    // Where the samples may lie, counted from the moof's first byte.
    uint64_t data_from = h.size + mdat->header, data_to = h.size + mdat->size;

    Box* mfhd = moof->Child("mfhd");
    if (!mfhd || mfhd->data.size() != 8) return Fail(at, "'moof' has no valid 'mfhd'");
    Put(mfhd->data, 4, ++sequence_, 4);
    std::vector<Box*> moved_truns;  // those whose data_offset counts from the moof's start
    bool has_saio = false;
    uint64_t data_end = 0;  // the previous traf's data end, for a traf that counts from it
    bool first_traf = true;
    for (Box& traf : moof->children) {
      if (traf.type != "traf") continue;
      Box* tfhd_box = traf.Child("tfhd");
      if (!tfhd_box) return Fail(at, "'traf' has no 'tfhd'");
      auto tfhd = ReadTfhd(*tfhd_box);
      if (!tfhd) return Fail(at, tfhd.error());
      if (tfhd->track_id != track.track_id)
        return Fail(at, fmt::format("'traf' for track {}", tfhd->track_id));
      Defaults d = track.trex;  // what applies to this segment's samples
      if (tfhd->flags & kSampleDescriptionIndex) d.description = tfhd->d.description;
      if (tfhd->flags & kDefaultDuration) d.duration = tfhd->d.duration;
      if (tfhd->flags & kDefaultSize) d.size = tfhd->d.size;
      if (tfhd->flags & kDefaultFlags) d.flags = tfhd->d.flags;
      if (d.description == 0 || d.description > entry_index.size())
        return Fail(at, fmt::format("'tfhd' names sample entry {} of {}", d.description,
                                    entry_index.size()));

      // The same defaults in the joined file, whose trex is the first segment's.
      Tfhd out = *tfhd;
      const Defaults& j = track_.trex;
      auto keep = [&](uint32_t flag, uint32_t value, uint32_t joined, uint32_t& field) {
        if ((tfhd->flags & flag) || value != joined) out.flags |= flag, field = value;
      };
      keep(kSampleDescriptionIndex, entry_index[d.description - 1], j.description,
           out.d.description);
      keep(kDefaultDuration, d.duration, j.duration, out.d.duration);
      keep(kDefaultSize, d.size, j.size, out.d.size);
      keep(kDefaultFlags, d.flags, j.flags, out.d.flags);
      tfhd_box->data = WriteTfhd(out);

      // Its time: the tfdt, else where the fragment before ended.
      uint64_t time = running_;
      Box* tfdt = traf.Child("tfdt");
      if (tfdt) {
        if (tfdt->version() > 1 || tfdt->data.size() != (tfdt->version() == 1 ? 12u : 8u))
          return Fail(at, "'tfdt' of the wrong size");
        time = Get(tfdt->data, 4, tfdt->version() == 1 ? 8 : 4);
      }
      if (!first_time_) first_time_ = time;
      if (time < *first_time_)
        return Fail(at, "a fragment's decode time before the segment's first");
      uint64_t joined_time;
      if (__builtin_add_overflow(time - *first_time_, base, &joined_time))
        return Fail(at, "decode time out of range");
      if (!tfdt) {
        auto it = std::find_if(traf.children.begin(), traf.children.end(),
                               [](const Box& b) { return b.type == "tfhd"; });
        tfdt = &*traf.children.insert(it + 1, Box{.type = "tfdt", .data = std::string(12, '\0')});
        tfdt->data[0] = 1;
      } else if (tfdt->version() == 0 && joined_time > UINT32_MAX) {
        tfdt->data = std::string(12, '\0');
        tfdt->data[0] = 1;
      }
      Put(tfdt->data, 4, joined_time, tfdt->version() == 1 ? 8 : 4);

      // Its samples: how long they last, and that their bytes lie in the mdat.
      // (8.8.7: the base is the moof's start, or for a later traf without default-base-is-moof,
      // where the traf before's data ended; a trun without data_offset follows the one before.)
      bool from_moof = first_traf || (tfhd->flags & kDefaultBaseIsMoof);
      const uint64_t traf_base = from_moof ? 0 : data_end;
      uint64_t run_at = traf_base;
      uint64_t duration = 0;
      std::optional<std::pair<uint64_t, uint64_t>> first_sample;  // from the moof's start, size
      for (Box& b : traf.children) {
        if (b.type == "saio") has_saio = true;
        if (b.type != "trun") continue;
        auto trun = ReadTrun(b, d);
        if (!trun) return Fail(at, trun.error());
        if (trun->data_offset) {
          int64_t start = static_cast<int64_t>(traf_base) + *trun->data_offset;
          run_at = start < 0 ? 0 : static_cast<uint64_t>(start);
          if (from_moof) moved_truns.push_back(&b);
        }
        if (run_at < data_from || run_at > data_to || trun->bytes > data_to - run_at)
          return Fail(at, "'trun' samples outside the 'mdat' that follows");
        if (trun->count && !first_sample) first_sample = {run_at, trun->first_size};
        run_at += trun->bytes;
        if (__builtin_add_overflow(duration, trun->duration, &duration))
          return Fail(at, "durations out of range");
      }
      data_end = run_at;
      first_traf = false;
      if (first_sample) {
        uint32_t entry = entry_index[d.description - 1];
        if (at_boundary_ && entry != last_entry_) {
          auto ok = NewEntryPlays(at + first_sample->first, first_sample->second, entry);
          if (!ok) return std::unexpected(ok.error());
          if (!*ok) return std::nullopt;
        }
        at_boundary_ = false;
        last_entry_ = entry;
      }
      uint64_t traf_end;
      if (__builtin_add_overflow(time, duration, &traf_end) ||
          __builtin_add_overflow(traf_end - *first_time_, base, &joined_time))
        return Fail(at, "durations out of range");
      running_ = traf_end;
      segment_end_ = std::max(segment_end_, traf_end - *first_time_);
    }
    // A moof that grew moves its mdat: data offsets that count from the moof's start grow too.
    int64_t grown = static_cast<int64_t>(moof->Size()) - static_cast<int64_t>(h.size);
    if (grown != 0) {
      if (has_saio) return Fail(at, "'moof' with 'saio' would move (unsupported)");
      for (Box* trun : moved_truns) {
        int64_t v = static_cast<int32_t>(Get(trun->data, kTrunDataOffsetAt, 4)) + grown;
        if (v > INT32_MAX || v < INT32_MIN) return Fail(at, "'trun' data_offset out of range");
        Put(trun->data, kTrunDataOffsetAt, static_cast<uint32_t>(v), 4);
      }
    }
    JoinPiece piece;
    moof->Write(piece.bytes);
    piece.length = piece.bytes.size();
    plan_.pieces.push_back(std::move(piece));
    if (mdat->to_end) {
      // Not the end of the joined file: its size written out, in a header of the same length.
      if (mdat->size > UINT32_MAX) return Fail(mdat_at, "'mdat' of size 0 (to the end) over 4 GiB");
      JoinPiece header;
      Append(header.bytes, mdat->size, 4);
      header.bytes += "mdat";
      header.length = header.bytes.size();
      plan_.pieces.push_back(std::move(header));
      plan_.pieces.push_back(
          JoinPiece{.length = mdat->size - 8, .input = current_, .file_offset = mdat_at + 8});
    } else {
      plan_.pieces.push_back(
          JoinPiece{.length = mdat->size, .input = current_, .file_offset = mdat_at});
    }
    return mdat_at + mdat->size;
  }

  // Whether a segment whose first sample (`size` bytes at `at`) uses another sample entry than
  // the sample before it can follow that sample. Measured with Chromium 156 (Debian) and FFmpeg
  // 5.1 on segments of 320x200 then 640x400 joined with both sample entries in the stsd and
  // tfhd naming each fragment's: neither switches to the second entry's SPS/PPS (avcC) at the
  // boundary: Chromium stops with PIPELINE_ERROR_DECODE in the second segment, ffmpeg reports
  // every frame at 320x200 with macroblock errors. When each keyframe also carries its SPS and
  // PPS in the stream (x264 repeat-headers), both play the joined file through, every frame at
  // its own size and videoWidth following. So a new sample entry joins only when the first
  // sample carries its parameter sets.
  std::expected<bool, JoinError> NewEntryPlays(uint64_t at, uint64_t size, uint32_t entry) {
    int length_size = NalLengthSize(entry_boxes_[entry - 1]);
    if (length_size > 0) {
      auto head = Read(at, std::min<uint64_t>(size, 4096));
      if (!head) return std::unexpected(head.error());
      if (HasParameterSets(*head, length_size)) return true;
    }
    plan_.stopped_because = fmt::format(
        "{}: its sample entry ('{}') is not the one before it (another screen size), and its "
        "first sample, at {}, carries no SPS and PPS for a player to switch to",
        inputs_[current_].path, entry_boxes_[entry - 1].type, at);
    return false;
  }

  // The moov with the total duration and every sample entry; the pieces' offsets.
  std::expected<JoinedMp4, JoinError> Finish() {
    current_ = 0;
    const uint32_t media_ts = track_.timescale;
    Box& mvhd = *moov_.Child("mvhd");
    Box& trak = *moov_.Child("trak");
    Box& mdhd = *trak.Child("mdia")->Child("mdhd");
    Box& stsd = *trak.Child("mdia")->Child("minf")->Child("stbl")->Child("stsd");
    Box& mvex = *moov_.Child("mvex");
    uint64_t movie_ts = Get(mvhd.data, 4 + 2 * Layout(mvhd, 4)->times, 4);
    uint64_t movie_duration = Rescale(end_, movie_ts, media_ts, true);
    SetDuration(mvhd, 4, movie_duration);
    SetDuration(*trak.Child("tkhd"), 8, movie_duration);
    SetDuration(mdhd, 4, end_);
    Box* mehd = mvex.Child("mehd");
    if (!mehd) mehd = &*mvex.children.insert(mvex.children.begin(), Box{.type = "mehd"});
    mehd->data.clear();
    Append(mehd->data, movie_duration > UINT32_MAX ? 0x01000000 : 0, 4);
    Append(mehd->data, movie_duration, movie_duration > UINT32_MAX ? 8 : 4);
    stsd.children = entry_boxes_;
    Put(stsd.data, 4, entries_.size(), 4);
    for (Box& b : mvex.children)
      if (b.type == "trex") Put(b.data, 8, track_.trex.description, 4);

    JoinPiece head;
    head.bytes = ftyp_;
    moov_.Write(head.bytes);
    head.length = head.bytes.size();
    plan_.pieces.insert(plan_.pieces.begin(), std::move(head));
    uint64_t offset = 0;
    for (JoinPiece& p : plan_.pieces) {
      p.offset = offset;
      offset += p.length;
    }
    plan_.size = offset;
    plan_.timescale = media_ts;
    plan_.duration_units = end_;
    plan_.duration_ms = Ms(end_, media_ts);
    plan_.sample_entries = static_cast<uint32_t>(entries_.size());
    return std::move(plan_);
  }

  const std::vector<JoinInput>& inputs_;
  JoinReader& reader_;
  int current_ = 0;
  JoinedMp4 plan_;
  std::string ftyp_;
  Box moov_;
  Track track_;
  std::vector<std::string> entries_;  // the joined stsd's, as bytes to compare
  std::vector<Box> entry_boxes_;      // the same, to write
  uint32_t sequence_ = 0;
  uint32_t last_entry_ = 0;  // the joined stsd's entry the last sample so far uses
  uint64_t end_ = 0;         // where the joined timeline ends so far (media timescale)
  // Within the current input:
  std::optional<uint64_t> first_time_;
  uint64_t running_ = 0, segment_end_ = 0;
  bool at_boundary_ = false;  // no sample of the input yet (and it is not the first)
};

}  // namespace

FileJoinReader::FileJoinReader(std::vector<JoinInput> inputs)
    : inputs_(std::move(inputs)), fds_(inputs_.size()) {}

std::expected<void, JoinError> FileJoinReader::Read(int input, uint64_t offset,
                                                    std::span<char> out) {
  if (input < 0 || static_cast<size_t>(input) >= inputs_.size())
    return std::unexpected(JoinError{fmt::format("no input {}", input)});
  const JoinInput& in = inputs_[input];
  if (offset > in.length || out.size() > in.length - offset)
    return std::unexpected(JoinError{fmt::format("{}: {} bytes at {} are past its length {}",
                                                 in.path, out.size(), offset, in.length)});
  UniqueFd& fd = fds_[input];
  if (!fd) {
    fd.reset(::open(in.path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd)
      return std::unexpected(JoinError{fmt::format("{}: {}", in.path, std::strerror(errno))});
  }
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n =
        ::pread(fd.get(), out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return std::unexpected(
          JoinError{fmt::format("{}: at {}: {}", in.path, offset + done, std::strerror(errno))});
    if (n == 0)
      return std::unexpected(JoinError{fmt::format("{}: ends at {}, short of its length {}",
                                                   in.path, offset + done, in.length)});
    done += static_cast<size_t>(n);
  }
  return {};
}

std::expected<JoinedMp4, JoinError> PlanJoin(const std::vector<JoinInput>& inputs,
                                             JoinReader& reader) {
  return Planner(inputs, reader).Run();
}

std::expected<JoinedMp4, JoinError> PlanJoin(const std::vector<JoinInput>& inputs) {
  FileJoinReader reader(inputs);
  return PlanJoin(inputs, reader);
}

std::expected<size_t, JoinError> ReadJoined(const JoinedMp4& plan, JoinReader& reader,
                                            uint64_t offset, std::span<char> out) {
  if (offset >= plan.size) return 0;
  size_t n = static_cast<size_t>(std::min<uint64_t>(out.size(), plan.size - offset));
  auto it = std::upper_bound(plan.pieces.begin(), plan.pieces.end(), offset,
                             [](uint64_t o, const JoinPiece& p) { return o < p.offset; });
  size_t done = 0;
  for (--it; done < n; ++it) {
    uint64_t skip = offset + done - it->offset;
    size_t take = static_cast<size_t>(std::min<uint64_t>(it->length - skip, n - done));
    if (it->input < 0) {
      std::memcpy(out.data() + done, it->bytes.data() + skip, take);
    } else if (auto r = reader.Read(it->input, it->file_offset + skip, out.subspan(done, take));
               !r) {
      return std::unexpected(r.error());
    }
    done += take;
  }
  return n;
}

std::expected<size_t, JoinError> ReadJoined(const JoinedMp4& plan,
                                            const std::vector<JoinInput>& inputs, uint64_t offset,
                                            std::span<char> out) {
  FileJoinReader reader(inputs);
  return ReadJoined(plan, reader, offset, out);
}

}  // namespace deskbox::recorder
