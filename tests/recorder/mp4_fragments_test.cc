// ScanFragments on hand-made box sequences: whole files, files cut inside a box, and layouts a
// recording segment never has.
#include "recorder/mp4_fragments.h"

#include <gtest/gtest.h>

#include <string>

namespace deskbox::recorder {
namespace {

std::string Box(const std::string& type, size_t payload, char fill = 0) {
  uint32_t size = static_cast<uint32_t>(8 + payload);
  std::string b{static_cast<char>(size >> 24), static_cast<char>(size >> 16), static_cast<char>(size >> 8),
                static_cast<char>(size)};
  return b + type + std::string(payload, fill);
}
std::string Box64(const std::string& type, size_t payload) {
  uint64_t size = 16 + payload;
  std::string b{0, 0, 0, 1};
  b += type;
  for (int i = 7; i >= 0; --i) b += static_cast<char>(size >> (8 * i));
  return b + std::string(payload, 0);
}
const std::string kHead = Box("ftyp", 20) + Box("moov", 700);
std::string Fragment(size_t samples = 300) { return Box("moof", 100) + Box("mdat", samples); }

TEST(Mp4Fragments, AWholeSegmentIsCompleteWithItsFragmentsCounted) {
  std::string file = kHead + Fragment() + Fragment() + Fragment() + Box("mfra", 40);
  auto l = ScanFragments(file);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->fragments, 3u);
  EXPECT_EQ(l->header_length, kHead.size());
  EXPECT_EQ(l->whole_length, file.size());
  EXPECT_TRUE(l->complete);
}

TEST(Mp4Fragments, ASegmentCutAnywhereInsideAFragmentKeepsTheFragmentsBefore) {
  std::string whole = kHead + Fragment() + Fragment();
  std::string third = Fragment();
  for (size_t cut = 0; cut < third.size(); cut += 7) {
    auto l = ScanFragments(whole + third.substr(0, cut));
    ASSERT_TRUE(l) << cut << ": " << l.error().message;
    EXPECT_EQ(l->fragments, 2u) << cut;
    EXPECT_EQ(l->whole_length, whole.size()) << cut;
    EXPECT_EQ(l->complete, cut == 0) << cut;
  }
}

TEST(Mp4Fragments, ABoxWhoseSizeWasNeverWrittenEndsTheWholePart) {
  std::string whole = kHead + Fragment();
  std::string unsized = std::string{0, 0, 0, 0} + "mdat" + std::string(50, 1);
  auto l = ScanFragments(whole + Box("moof", 100) + unsized);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->whole_length, whole.size());
  EXPECT_EQ(l->fragments, 1u);
}

TEST(Mp4Fragments, SixtyFourBitSizesAreRead) {
  std::string file = kHead + Box("moof", 100) + Box64("mdat", 5000);
  auto l = ScanFragments(file);
  ASSERT_TRUE(l) << l.error().message;
  EXPECT_EQ(l->fragments, 1u);
  EXPECT_TRUE(l->complete);
  // A 64-bit size larger than the file: cut.
  auto cut = ScanFragments(file.substr(0, file.size() - 1));
  ASSERT_TRUE(cut);
  EXPECT_EQ(cut->fragments, 0u);
  EXPECT_EQ(cut->whole_length, kHead.size());
}

TEST(Mp4Fragments, AHeaderAloneIsPlayableButEmpty) {
  auto l = ScanFragments(kHead);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->fragments, 0u);
  EXPECT_EQ(l->whole_length, kHead.size());
}

TEST(Mp4Fragments, WhatNoSegmentLooksLikeIsRefusedWithTheReason) {
  struct Case {
    std::string bytes, error;
  };
  std::vector<Case> cases = {
      {"", "no 'moov' box: nothing playable"},
      {Box("ftyp", 20), "no 'moov' box: nothing playable"},
      {Box("ftyp", 20) + Box("moov", 10).substr(0, 12), "no 'moov' box: nothing playable"},
      {Box("moov", 10), "no 'ftyp' box at the start"},
      {Box("ftyp", 20) + Box("mdat", 10), "'mdat' before the 'moov' box"},
      {kHead + Box("mdat", 10), "'mdat' at 736 with no 'moof' before it"},
      {kHead + Box("moof", 10) + Box("moof", 10), "'moof' at 754 follows a 'moof' with no 'mdat'"},
      {kHead + Box("trak", 10), "unexpected box 'trak' at 736"},
      {kHead + std::string{0, 0, 0, 4} + "moof", "box 'moof' at 736 has size 4"},
  };
  for (const auto& c : cases) {
    auto l = ScanFragments(c.bytes);
    ASSERT_FALSE(l) << c.error;
    EXPECT_EQ(l.error().message, c.error);
  }
}

}  // namespace
}  // namespace deskbox::recorder
