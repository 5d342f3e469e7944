// RecordingIndex and CheckRecording: what a log's recording events list, and how the segment
// files on disk compare with it (modified, missing, unlisted; the live segment left alone).
#include "recorder/recording_check.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/sha256.h"
#include "recorder/event_log.h"
#include "recorder_test_util.h"

namespace deskbox::recorder {
namespace {

using testing::TempDir;

v1::Recording Segment(uint32_t index, const std::string& bytes) {
  v1::Recording r;
  r.set_phase("segment");
  r.set_index(index);
  r.set_file(SegmentFile(index));
  r.set_start_unix_ms(1000 * index);
  r.set_end_unix_ms(1000 * index + 900);
  r.set_bytes(bytes.size());
  r.set_sha256(ToHex(Sha256(bytes)));
  return r;
}

v1::Recording Phase(const char* phase, uint32_t index, int64_t start = 0) {
  v1::Recording r;
  r.set_phase(phase);
  r.set_index(index);
  r.set_start_unix_ms(start);
  return r;
}

void Put(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A log for sandbox "sb-rec" holding `records`, and the segment files their contents name.
struct Fixture {
  TempDir dir;
  std::string log = dir.File("sb-rec.events");
  std::string segs = dir.path();
  void Write(const std::vector<v1::Recording>& records) {
    auto w = EventLogWriter::Open(log, "sb-rec", {});
    ASSERT_TRUE(w) << w.error().message;
    for (const auto& r : records) {
      Event e;
      *e.mutable_recording() = r;
      ASSERT_TRUE((*w)->Append(e));
    }
  }
};

TEST(SegmentNames, OnlySixDigitsAndMp4NameASegment) {
  EXPECT_EQ(SegmentFile(3), "000003.mp4");
  EXPECT_EQ(ParseSegmentFile("000003.mp4"), 3u);
  EXPECT_EQ(ParseSegmentFile("999999.mp4"), 999999u);
  for (const char* bad : {"3.mp4", "0000003.mp4", "00000a.mp4", "000003.mp4.bak", "../00003.mp4",
                          "000003.MP4", "", "000003.mp", "/00003.mp4"})
    EXPECT_FALSE(ParseSegmentFile(bad)) << bad;
}

TEST(RecordingIndex, ApplyingAnEventTwiceChangesNothingAndDeletionHidesWhatCameBefore) {
  RecordingIndex index;
  index.Apply(Phase("started", 0, 500));
  index.Apply(Segment(0, "aaaa"), 7);
  index.Apply(Segment(0, "aaaa"));  // seen live, then again from the file
  index.Apply(Segment(1, "bb"));
  ASSERT_EQ(index.Segments().size(), 2u);
  EXPECT_EQ(index.Segments()[0].seq, 7u) << "the log's seq is kept";
  EXPECT_EQ(index.StartOf(0), 500);
  EXPECT_EQ(index.StartOf(5), 0);
  EXPECT_EQ(index.next_index(), 2u);
  index.Apply(Phase("started", 2, 2000));
  EXPECT_EQ(index.next_index(), 3u);
  index.Apply(Phase("deleted", 2));
  EXPECT_TRUE(index.Segments().empty());
  EXPECT_EQ(index.deleted_below(), 2u);
  index.Apply(Phase("deleted", 1));  // an older deletion does not bring anything back
  EXPECT_EQ(index.deleted_below(), 2u);
  index.Apply(Segment(2, "cc"));
  ASSERT_EQ(index.Segments().size(), 1u);
  EXPECT_EQ(index.Segments()[0].index, 2u);
}

TEST(CheckRecording, MatchingFilesAreOkAndEveryDifferenceIsNamed) {
  Fixture f;
  f.Write({Segment(0, "zero"), Segment(1, "one!"), Phase("started", 2, 2000)});
  Put(f.segs + "/000000.mp4", "zero");
  Put(f.segs + "/000001.mp4", "one!");
  Put(f.segs + "/000002.mp4", "live, being written");
  auto ok = CheckRecording(f.log, f.segs, 2u);
  EXPECT_TRUE(ok.ok) << (ok.problems.empty() ? "" : ok.problems[0].message);
  EXPECT_EQ(ok.events, 3u);
  EXPECT_EQ(ok.segments_checked, 2u);
  EXPECT_EQ(ok.head.size(), 64u);

  // Without the live index, the file being written is one no event lists.
  auto unlisted = CheckRecording(f.log, f.segs, std::nullopt);
  ASSERT_EQ(unlisted.problems.size(), 1u);
  EXPECT_EQ(unlisted.problems[0].kind, "segment_unlisted");
  EXPECT_EQ(unlisted.problems[0].file, "000002.mp4");

  Put(f.segs + "/000001.mp4", "one?");  // same size, other bytes
  auto modified = CheckRecording(f.log, f.segs, 2u);
  EXPECT_FALSE(modified.ok);
  ASSERT_EQ(modified.problems.size(), 1u);
  EXPECT_EQ(modified.problems[0].kind, "segment_modified");
  EXPECT_EQ(modified.problems[0].index, 1u);
  EXPECT_NE(modified.problems[0].message.find("SHA-256"), std::string::npos) << modified.problems[0].message;

  Put(f.segs + "/000001.mp4", "one!!");  // another size
  EXPECT_NE(CheckRecording(f.log, f.segs, 2u).problems.at(0).message.find("5 bytes"), std::string::npos);

  ::unlink((f.segs + "/000000.mp4").c_str());
  auto missing = CheckRecording(f.log, f.segs, 2u);
  ASSERT_EQ(missing.problems.size(), 2u);
  EXPECT_EQ(missing.problems[0].kind, "segment_missing");
  EXPECT_EQ(missing.problems[0].file, "000000.mp4");
}

TEST(CheckRecording, DeletedSegmentsAreNotExpectedAndABrokenLogIsReported) {
  Fixture f;
  f.Write({Segment(0, "zero"), Segment(1, "one!"), Phase("deleted", 2), Segment(2, "two")});
  Put(f.segs + "/000002.mp4", "two");
  auto ok = CheckRecording(f.log, f.segs, std::nullopt);
  EXPECT_TRUE(ok.ok);
  EXPECT_EQ(ok.segments_checked, 1u);

  // One flipped byte in the log: the chain breaks there.
  std::string bytes;
  {
    std::ifstream in(f.log, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() - 40] ^= 1;
  Put(f.log, bytes);
  auto broken = CheckRecording(f.log, f.segs, std::nullopt);
  EXPECT_FALSE(broken.ok);
  ASSERT_FALSE(broken.problems.empty());
  EXPECT_EQ(broken.problems[0].kind, "log_broken");
  EXPECT_LT(broken.events, 4u);
}

TEST(CheckRecording, NoLogAndNoDirectoryIsAnEmptyRecording) {
  TempDir dir;
  auto r = CheckRecording(dir.File("none.events"), dir.File("none"), std::nullopt);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.events, 0u);
  EXPECT_EQ(r.segments_checked, 0u);
}

}  // namespace
}  // namespace deskbox::recorder

namespace deskbox::recorder {
namespace {

constexpr int64_t kDay = 86'400'000;

TEST(PlanRetention, OldEndedRecordingsGoThenTheLongestEndedUntilUnderTheQuota) {
  const int64_t now = 100 * kDay;
  std::vector<RecordingUsage> usage = {
      {"live", 500, false, 0},              // never removed, however big
      {"old", 100, true, now - 31 * kDay},  // past 30 days of retention
      {"ended-a", 200, true, now - 2 * kDay},
      {"ended-b", 300, true, now - 5 * kDay},
      {"empty", 0, true, now - 40 * kDay},  // nothing to remove
  };
  auto plan = PlanRetention(usage, now, {.retention_days = 30, .quota_bytes = 800});
  ASSERT_EQ(plan.remove.size(), 2u);
  EXPECT_EQ(plan.remove[0].id, "old");
  EXPECT_NE(plan.remove[0].why.find("retention"), std::string::npos);
  EXPECT_EQ(plan.remove[1].id, "ended-b") << "the longest ended goes first";
  EXPECT_NE(plan.remove[1].why.find("quota"), std::string::npos);
  EXPECT_EQ(plan.bytes_after, 700u);
  EXPECT_FALSE(plan.over_quota);

  // Only live recordings left and still over: recording must stop.
  auto full = PlanRetention(usage, now, {.retention_days = 30, .quota_bytes = 400});
  EXPECT_EQ(full.remove.size(), 3u);
  EXPECT_EQ(full.bytes_after, 500u);
  EXPECT_TRUE(full.over_quota);

  // Retention 0 keeps every age; under the quota nothing goes.
  auto keep = PlanRetention(usage, now, {.retention_days = 0, .quota_bytes = 2000});
  EXPECT_TRUE(keep.remove.empty());
  EXPECT_EQ(keep.bytes_after, 1100u);
  EXPECT_FALSE(keep.over_quota);
}

}  // namespace
}  // namespace deskbox::recorder
