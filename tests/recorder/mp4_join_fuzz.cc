// PlanJoin + ReadJoined on inputs made from arbitrary bytes, held in memory: no crash; a plan's
// pieces cover it exactly and read back the same in one go and in slices; the joined file scans
// as whole fragments; and it joins again to itself byte for byte.
//
// Random bytes rarely make a segment, so most inputs are read as a recipe instead: 1..3
// segments (ftyp, moov with one track, then moof + mdat pairs), each with its own choices —
// timescale, sample entry (two SPS variants), fragments with or without tfdt (version 0 or 1,
// small or past 32 bits), per-sample or default durations and sizes, an SPS/PPS in the first
// sample or not, a second traf, 64-bit or size-0 mdat headers, free and mfra boxes — then a few
// bytes overwritten and the length maybe cut, all as the fuzz bytes say.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "recorder/mp4_fragments.h"
#include "recorder/mp4_join.h"

namespace {

using deskbox::recorder::JoinedMp4;
using deskbox::recorder::JoinError;
using deskbox::recorder::JoinInput;
using deskbox::recorder::JoinReader;

class MemoryReader : public JoinReader {
 public:
  explicit MemoryReader(std::vector<std::string> files) : files_(std::move(files)) {}
  std::expected<void, JoinError> Read(int input, uint64_t offset, std::span<char> out) override {
    if (input < 0 || static_cast<size_t>(input) >= files_.size())
      __builtin_trap();  // reads only its inputs
    const std::string& f = files_[input];
    if (offset > f.size() || out.size() > f.size() - offset)
      __builtin_trap();  // and within their length
    std::copy_n(f.data() + offset, out.size(), out.data());
    return {};
  }
  std::vector<JoinInput> Inputs() const {
    std::vector<JoinInput> in;
    for (size_t i = 0; i < files_.size(); ++i)
      in.push_back({"in" + std::to_string(i), files_[i].size()});
    return in;
  }

 private:
  std::vector<std::string> files_;
};

struct Bytes {
  const uint8_t* data;
  size_t size;
  uint8_t Next() { return size ? (--size, *data++) : 0; }
  uint32_t Next32() {
    return (uint32_t{Next()} << 24) | (uint32_t{Next()} << 16) | (uint32_t{Next()} << 8) | Next();
  }
};

std::string U(uint64_t v, int n) {
  std::string out;
  for (int i = n - 1; i >= 0; --i)
    out += static_cast<char>(i < 8 ? v >> (8 * i) : 0);  // n > 8: zeros first
  return out;
}
std::string B(const std::string& type, const std::string& payload) {
  return U(8 + payload.size(), 4) + type + payload;
}

// A segment's moov. One time in 16 it holds what no recording segment does (a second track,
// samples, an unknown codec, no avcC).
std::string Header(Bytes& in) {
  uint8_t choice = in.Next(), fault = in.Next();
  fault = fault >= 240 ? fault % 4 + 1 : 0;
  uint32_t timescale = choice & 1 ? 16000 : 1000;
  std::string sps = choice & 2 ? "\x67\x42\x00\x1e" : "\x67\x42\x00\x28";  // two screen sizes
  std::string avcc = B("avcC", std::string("\x01\x42\x00\x1e\xff\xe1\x00\x04", 8) + sps +
                                   std::string("\x01\x00\x02\x68\xce", 5));
  std::string entry =
      B(fault == 1 ? "hvc1" : "avc1", std::string(78, '\0') + (fault == 2 ? "" : avcc));
  std::string stsd = B("stsd", U(0, 4) + U(1, 4) + entry);
  std::string stbl = B("stbl", stsd + B("stsz", U(0, 4) + U(0, 4) + U(fault == 3 ? 1 : 0, 4)));
  std::string mdhd =
      choice & 4 ? B("mdhd", U(0x01000000, 4) + U(0, 16) + U(timescale, 4) + U(0, 8) + U(0, 4))
                 : B("mdhd", U(0, 12) + U(timescale, 4) + U(0, 8));
  std::string mdia =
      B("mdia", mdhd + B("hdlr", U(0, 8) + "vide" + std::string(13, '\0')) + B("minf", stbl));
  std::string trak =
      B("trak", B("tkhd", U(3, 4) + U(0, 8) + U(1, 4) + U(0, 8) + std::string(60, '\0')) + mdia);
  std::string trex =
      B("trex", U(0, 4) + U(1, 4) + U(1, 4) + U((choice >> 3 & 3) * 512, 4) + U(0, 8));
  std::string mvex = B("mvex", (choice & 0x20 ? B("mehd", U(0, 8)) : "") + trex);
  std::string moov =
      B("mvhd", U(0, 12) + U(1000, 4) + U(0, 4) + std::string(80, '\0')) + trak + mvex;
  if (fault == 4) moov += trak;
  return B("ftyp", "isom" + U(0, 4) + "isomiso6") + (choice & 0x40 ? B("free", "x") : "") +
         B("moov", moov);
}

// One traf (its trun's data_offset left 0); its samples' bytes appended to `data`. `time`: the
// segment's decode time so far (a tfdt names it, or not).
std::string Traf(Bytes& in, std::string& data, bool& first, uint64_t& time) {
  uint8_t choice = in.Next();
  uint32_t tfhd_flags = 0x020000;
  if (choice & 1) tfhd_flags |= 0x08;  // default duration
  if (choice & 2) tfhd_flags |= 0x10;  // default size
  if (choice & 4) tfhd_flags |= 0x02;  // sample description index (2, which is not there, 1 in 8)
  uint32_t default_duration = in.Next() * 40, default_size = 6 + (choice >> 7) * 14;
  std::string tfhd = U(tfhd_flags, 4) + U(1, 4) +
                     (tfhd_flags & 0x02 ? U(in.Next() >= 248 ? 2 : 1, 4) : "") +
                     (tfhd_flags & 0x08 ? U(default_duration, 4) : "") +
                     (tfhd_flags & 0x10 ? U(default_size, 4) : "");
  std::string tfdt;
  switch (choice >> 3 & 3) {
    case 0:
      break;  // none: where the fragment before ended
    case 1:
      tfdt = time <= UINT32_MAX ? B("tfdt", U(0, 4) + U(time, 4)) : "";
      break;
    default:
      tfdt = B("tfdt", U(0x01000000, 4) + U(time, 8));
  }
  uint32_t count = in.Next() % 5;
  uint32_t trun_flags = 0x001 | (tfhd_flags & 0x08 ? 0 : 0x100) | (tfhd_flags & 0x10 ? 0 : 0x200);
  std::string entries;
  for (uint32_t i = 0; i < count; ++i) {
    // A first sample with SPS and PPS before its slice, or a slice alone.
    std::string sample = first && (choice & 0x20)
                             ? std::string("\0\0\0\x04\x67\x42\x00\x1e\0\0\0\x02\x68\xce", 14)
                             : std::string();
    first = false;
    sample += std::string("\0\0\0\x02\x65\x88", 6);
    if (tfhd_flags & 0x10) sample.resize(default_size, '\0');
    uint32_t duration = tfhd_flags & 0x08 ? default_duration : in.Next() * 100 + 1;
    if (trun_flags & 0x100) entries += U(duration, 4);
    if (trun_flags & 0x200) entries += U(sample.size(), 4);
    time += duration;
    data += sample;
  }
  std::string trun = B("trun", U(trun_flags, 4) + U(count, 4) + U(0, 4) + entries);
  return B("tfhd", tfhd) + tfdt + trun;
}

std::string Fragment(Bytes& in, uint32_t seq, bool& first, uint64_t& time) {
  uint8_t choice = in.Next();
  size_t mdat_header = choice % 4 == 1 ? 16 : 8;
  // Built twice from the same bytes: first to learn the moof's size, which the data offsets count.
  const Bytes start = in;
  const bool start_first = first;
  const uint64_t start_time = time;
  std::string data;
  auto build = [&](size_t data_at) {
    in = start;
    first = start_first;
    time = start_time;
    data.clear();
    std::string trafs;
    for (int n = choice & 0x80 ? 2 : 1; n > 0; --n) {
      size_t before = data.size();
      std::string traf = Traf(in, data, first, time);
      // The trun's data_offset: where this traf's samples begin.
      size_t at = traf.find("trun") + 12;
      traf.replace(at, 4, U(data_at + before, 4));
      trafs += B("traf", traf);
    }
    return B("moof", B("mfhd", U(0, 4) + U(seq, 4)) + trafs);
  };
  std::string moof = build(0);
  moof = build(moof.size() + mdat_header);
  if (choice & 0x40) time += in.Next() * 10;  // a gap
  std::string mdat = choice % 4 == 1   ? U(1, 4) + "mdat" + U(16 + data.size(), 8) + data
                     : choice % 4 == 2 ? U(0, 4) + "mdat" + data  // size 0: to the end of the file
                                       : B("mdat", data);
  return moof + mdat;
}

std::string Segment(Bytes& in) {
  std::string out = Header(in);
  uint8_t choice = in.Next();
  // Decode times from 0, from just under 2^32 or from past it.
  uint64_t time = choice & 0x10   ? 0xffffff00u + in.Next()
                  : choice & 0x20 ? uint64_t{in.Next32()} << 12
                                  : 0;
  bool first = true;
  for (uint32_t i = 0, fragments = choice % 4; i < fragments; ++i) {
    out += Fragment(in, i + 1, first, time);
    if (in.Next() % 8 == 0) out += B("free", "");
  }
  if (choice & 0x40) out += B("mfra", U(0, 8));
  // A few bytes overwritten, and maybe a cut.
  for (int edits = in.Next() % 8 - 4; edits > 0 && !out.empty(); --edits) {
    size_t at = ((size_t{in.Next()} << 8) | in.Next()) % out.size();
    out[at] = static_cast<char>(in.Next());
  }
  if (in.Next() % 8 == 0 && !out.empty())
    out.resize(out.size() - in.Next() % std::min<size_t>(out.size(), 64));
  return out;
}

void Check(std::vector<std::string> files) {
  MemoryReader reader(files);
  auto inputs = reader.Inputs();
  auto plan = deskbox::recorder::PlanJoin(inputs, reader);
  if (!plan) return;
  if (plan->joined_inputs < 1 || plan->joined_inputs > inputs.size()) __builtin_trap();
  if (plan->segment_offset_ms.size() != plan->joined_inputs) __builtin_trap();
  if (!std::is_sorted(plan->segment_offset_ms.begin(), plan->segment_offset_ms.end()) ||
      plan->duration_ms < plan->segment_offset_ms.back())
    __builtin_trap();
  uint64_t at = 0;
  for (const auto& p : plan->pieces) {
    if (p.offset != at) __builtin_trap();
    if (p.input < 0 && p.bytes.size() != p.length) __builtin_trap();
    at += p.length;
  }
  if (at != plan->size || plan->size > (64u << 20)) __builtin_trap();
  std::string joined(plan->size, '\0');
  auto n = deskbox::recorder::ReadJoined(*plan, reader, 0, joined);
  if (!n || *n != plan->size) __builtin_trap();
  for (uint64_t from = 0; from < plan->size; from += 37) {
    char buf[53];
    auto k = deskbox::recorder::ReadJoined(*plan, reader, from, buf);
    if (!k || *k != std::min<uint64_t>(sizeof buf, plan->size - from)) __builtin_trap();
    if (std::string_view(buf, *k) != std::string_view(joined).substr(from, *k)) __builtin_trap();
  }
  auto layout = deskbox::recorder::ScanFragments(joined);
  if (!layout || !layout->complete) __builtin_trap();
  // Joined again, alone: the same file.
  MemoryReader again_reader({joined});
  auto again_inputs = again_reader.Inputs();
  auto again = deskbox::recorder::PlanJoin(again_inputs, again_reader);
  if (!again || again->size != plan->size || again->duration_units != plan->duration_units)
    __builtin_trap();
  std::string rejoined(again->size, '\0');
  if (!deskbox::recorder::ReadJoined(*again, again_reader, 0, rejoined) || rejoined != joined)
    __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  Bytes in{data + 1, size - 1};
  std::vector<std::string> files;
  if (data[0] % 4 == 0) {
    // Raw: the bytes split into up to three inputs at 0xff bytes.
    std::string_view rest(reinterpret_cast<const char*>(in.data), in.size);
    while (files.size() < 3) {
      size_t cut = rest.find('\xff');
      files.emplace_back(rest.substr(0, cut));
      if (cut == std::string_view::npos) break;
      rest.remove_prefix(cut + 1);
    }
  } else {
    for (int n = 1 + data[0] % 3; n > 0; --n) files.push_back(Segment(in));
  }
  Check(std::move(files));
  return 0;
}
