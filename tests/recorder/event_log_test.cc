#include "recorder/event_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/files.h"
#include "common/sha256.h"
#include "recorder_test_util.h"

namespace deskbox::recorder {
namespace {

using testing::AllKinds;
using testing::TempDir;
using Code = EventLogError::Code;

constexpr char kId[] = "sb-0123456789abcdef";

EventLogWriterOptions Fast() {
  return {.sync = SyncPolicy::kInterval, .sync_interval = {}};
}

std::string Slurp(const std::string& path) {
  auto r = ReadFile(path, 64 << 20);
  EXPECT_TRUE(r) << path;
  return r ? *r : std::string();
}

void Put(const std::string& path, std::string_view bytes) {
  ASSERT_TRUE(WriteFileAtomic(path, bytes, 0640));
}

uint32_t Be32(std::string_view s, size_t at) {
  auto u = reinterpret_cast<const uint8_t*>(s.data() + at);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | u[3];
}

// Start offset of every record, found by following the length fields (the format, by hand).
std::vector<size_t> RecordStarts(std::string_view log) {
  std::vector<size_t> starts;
  size_t at = 16 + Be32(log, 12) + 32;
  while (at < log.size()) {
    starts.push_back(at);
    at += 4 + Be32(log, at) + 32;
  }
  return starts;
}

// Writes AllKinds() to a new log at `path` and returns the events as stored.
std::vector<Event> WriteSample(const std::string& path, size_t repeat = 1) {
  auto w = EventLogWriter::Open(path, kId, Fast());
  EXPECT_TRUE(w) << w.error().message;
  std::vector<Event> stored;
  for (size_t i = 0; i < repeat; ++i) {
    for (auto e : AllKinds(kId)) {
      auto r = (*w)->Append(e);
      EXPECT_TRUE(r) << r.error().message;
      stored.push_back(e);
    }
  }
  return stored;
}

std::vector<Event> ReadAllEvents(const std::string& path, uint64_t since = 0) {
  auto r = EventLogReader::Open(path, {.since_seq = since});
  EXPECT_TRUE(r) << r.error().message;
  std::vector<Event> out;
  if (!r) return out;
  for (;;) {
    auto e = (*r)->Next();
    EXPECT_TRUE(e) << e.error().message;
    if (!e || !*e) break;
    out.push_back(**e);
  }
  return out;
}

TEST(EventLog, EveryKindRoundTrips) {
  TempDir dir;
  std::string path = dir.File("a.events");
  auto stored = WriteSample(path);
  auto read = ReadAllEvents(path);
  ASSERT_EQ(read.size(), 7u);
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].SerializeAsString(), stored[i].SerializeAsString()) << "event " << i;
    EXPECT_EQ(read[i].kind_case(), AllKinds(kId)[i].kind_case());
  }
  EXPECT_EQ(read[5].exec().argv_size(), 2);
  EXPECT_EQ(read[4].egress().bytes_down(), 54000u);
  EXPECT_EQ(read[0].time_unix_ns(), 1'706'702'400'123'456'789);
}

TEST(EventLog, WriterAssignsSeqAndSandboxIdAndChecksSetOnes) {
  TempDir dir;
  std::string path = dir.File("a.events");
  auto w = EventLogWriter::Open(path, kId, Fast());
  ASSERT_TRUE(w) << w.error().message;
  Event e;
  e.mutable_cdp()->set_method("Runtime.evaluate");
  ASSERT_TRUE((*w)->Append(e));
  EXPECT_EQ(e.seq(), 1u);
  EXPECT_EQ(e.sandbox_id(), kId);
  Event f = e;
  f.set_seq(2);  // a set seq is kept when it is the next one
  ASSERT_TRUE((*w)->Append(f));
  Event g = e;
  g.set_seq(7);
  auto r = (*w)->Append(g);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::kInvalidArgument);
  Event h = e;
  h.set_seq(0);
  h.set_sandbox_id("sb-other");
  r = (*w)->Append(h);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::kInvalidArgument);
  EXPECT_EQ((*w)->next_seq(), 3u);
  auto v = VerifyLog(path);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->count, 2u);
}

TEST(EventLog, FileIsExactlyTheDocumentedFormat) {
  TempDir dir;
  std::string path = dir.File("a.events");
  auto stored = WriteSample(path);
  // Rebuild the expected bytes from the format description alone.
  std::string expect("DBXEVT1\0", 8);
  expect += std::string("\0\0\0\1", 4);
  expect += std::string("\0\0\0", 3) + static_cast<char>(std::strlen(kId));
  expect += kId;
  Sha256Digest h = Sha256(expect);
  expect.append(reinterpret_cast<const char*>(h.data()), 32);
  for (const auto& e : stored) {
    std::string payload = e.SerializeAsString();
    std::string len{static_cast<char>(payload.size() >> 24),
                    static_cast<char>(payload.size() >> 16), static_cast<char>(payload.size() >> 8),
                    static_cast<char>(payload.size())};
    std::string hashed(reinterpret_cast<const char*>(h.data()), 32);
    hashed += len + payload;
    h = Sha256(hashed);
    expect += len + payload;
    expect.append(reinterpret_cast<const char*>(h.data()), 32);
  }
  EXPECT_EQ(Slurp(path), expect);
  auto v = VerifyLog(path);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->count, stored.size());
  EXPECT_EQ(v->last_seq, stored.size());
  EXPECT_EQ(v->head, h);
  EXPECT_EQ(v->bytes, expect.size());
  EXPECT_EQ(v->sandbox_id, kId);
}

TEST(EventLog, EmptyLogVerifiesWithTheHeaderHashAsHead) {
  TempDir dir;
  std::string path = dir.File("a.events");
  { ASSERT_TRUE(EventLogWriter::Open(path, kId, Fast())); }
  auto v = VerifyLog(path);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->count, 0u);
  std::string header = Slurp(path);
  EXPECT_EQ(header, EncodeLogHeader(kId));
  EXPECT_EQ(v->head, Sha256(std::string_view(header).substr(0, header.size() - 32)));
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST(EventLog, EveryFlippedByteIsDetectedAtItsRecord) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  const std::string good = Slurp(path);
  const auto starts = RecordStarts(good);
  ASSERT_EQ(starts.size(), 7u);
  std::string bad_path = dir.File("bad.events");
  for (size_t i = 0; i < good.size(); ++i) {
    // The record that byte i belongs to (0 = header) and its seq.
    size_t record_start = 0, seq = 0;
    for (size_t k = 0; k < starts.size(); ++k)
      if (i >= starts[k]) record_start = starts[k], seq = k + 1;
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::string bad = good;
      bad[i] ^= static_cast<char>(mask);
      Put(bad_path, bad);
      auto v = VerifyLog(bad_path);
      ASSERT_FALSE(v) << "flip 0x" << std::hex << int(mask) << std::dec << " at byte " << i
                      << " went unnoticed";
      EXPECT_EQ(v.error().offset, record_start) << "byte " << i << ": " << v.error().message;
      EXPECT_EQ(v.error().seq, seq) << "byte " << i << ": " << v.error().message;
      if (record_start > 0) {
        EXPECT_NE(v.error().message.find("offset " + std::to_string(record_start)),
                  std::string::npos)
            << v.error().message;
      }
    }
  }
}

TEST(EventLog, TruncationMidRecordIsDetectedAndReopenCutsTheTornTail) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  const std::string good = Slurp(path);
  const auto starts = RecordStarts(good);
  const size_t last = starts.back();
  std::string cut_path = dir.File("cut.events");
  for (size_t cut = last + 1; cut < good.size(); ++cut) {
    Put(cut_path, good.substr(0, cut));
    auto v = VerifyLog(cut_path);
    ASSERT_FALSE(v) << "cut at " << cut;
    EXPECT_EQ(v.error().code, Code::kTruncated) << v.error().message;
    EXPECT_EQ(v.error().offset, last);
    EXPECT_EQ(v.error().seq, 7u);

    auto w = EventLogWriter::Open(cut_path, kId, Fast());
    ASSERT_TRUE(w) << "cut at " << cut << ": " << w.error().message;
    EXPECT_EQ((*w)->truncated_bytes(), cut - last);
    EXPECT_EQ((*w)->next_seq(), 7u);
    EXPECT_EQ(Slurp(cut_path + ".torn-" + std::to_string(last)), good.substr(last, cut - last));
    Event e;
    e.mutable_lifecycle()->set_to_state("destroyed");
    ASSERT_TRUE((*w)->Append(e));
    EXPECT_EQ(e.seq(), 7u);
    w->reset();
    v = VerifyLog(cut_path);
    ASSERT_TRUE(v) << v.error().message;
    EXPECT_EQ(v->count, 7u);
    ::unlink((cut_path + ".torn-" + std::to_string(last)).c_str());
  }
}

TEST(EventLog, TruncationAtEveryPointIsReportedUnlessOnARecordBoundary) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  const std::string good = Slurp(path);
  auto starts = RecordStarts(good);
  starts.push_back(good.size());
  for (size_t cut = 0; cut < good.size(); ++cut) {
    auto v = VerifyLogBytes(std::string_view(good).substr(0, cut));
    auto boundary = std::find(starts.begin(), starts.end(), cut);
    if (boundary != starts.end()) {
      ASSERT_TRUE(v) << "cut at " << cut << ": " << v.error().message;
      EXPECT_EQ(v->count, static_cast<uint64_t>(boundary - starts.begin()));
    } else {
      EXPECT_FALSE(v) << "cut at " << cut << " went unnoticed";
    }
  }
}

TEST(EventLog, ReopenCutsAZeroFilledTail) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  std::string good = Slurp(path);
  Put(path, good + std::string(5000, '\0'));
  EXPECT_FALSE(VerifyLog(path));
  auto w = EventLogWriter::Open(path, kId, Fast());
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ((*w)->truncated_bytes(), 5000u);
  Event e;
  e.mutable_viewer_input()->set_kind("key");
  ASSERT_TRUE((*w)->Append(e));
  w->reset();
  auto v = VerifyLog(path);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->count, 8u);
}

TEST(EventLog, ReopenCutsADamagedLastRecordButRefusesDamageInTheMiddle) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  const std::string good = Slurp(path);
  const auto starts = RecordStarts(good);

  std::string bad = good;
  bad[starts.back() + 10] ^= 0x20;  // the last record's payload
  Put(path, bad);
  auto w = EventLogWriter::Open(path, kId, Fast());
  ASSERT_TRUE(w) << w.error().message;
  EXPECT_EQ((*w)->next_seq(), 7u);
  w->reset();
  EXPECT_EQ(Slurp(path), good.substr(0, starts.back()));

  bad = good;
  bad[starts[3] + 10] ^= 0x20;  // record 4 of 7
  Put(path, bad);
  w = EventLogWriter::Open(path, kId, Fast());
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, Code::kHashMismatch);
  EXPECT_EQ(w.error().offset, starts[3]);
  EXPECT_EQ(w.error().seq, 4u);
  EXPECT_EQ(Slurp(path), bad) << "damage in the middle must be left as evidence";
}

TEST(EventLog, WriterRefusesABadHeaderAndLeavesTheFile) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  const std::string good = Slurp(path);
  for (size_t cut : {size_t{0}, size_t{5}, size_t{20}, size_t{60}}) {
    Put(path, good.substr(0, cut));
    auto w = EventLogWriter::Open(path, kId, Fast());
    ASSERT_FALSE(w) << "header cut at " << cut;
    EXPECT_EQ(Slurp(path), good.substr(0, cut));
  }
}

TEST(EventLog, ReorderedInsertedOrRemovedRecordsAreDetected) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  const std::string good = Slurp(path);
  auto starts = RecordStarts(good);
  starts.push_back(good.size());
  auto record = [&](size_t k) { return good.substr(starts[k], starts[k + 1] - starts[k]); };
  const std::string head = good.substr(0, starts[0]);

  // Records 2 and 3 (seq 2, 3) swapped as they are.
  std::string swapped = head + record(0) + record(2) + record(1);
  for (size_t k = 3; k < 7; ++k) swapped += record(k);
  auto v = VerifyLogBytes(swapped);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, Code::kHashMismatch);
  EXPECT_EQ(v.error().offset, starts[1]);
  EXPECT_EQ(v.error().seq, 2u);

  // A record repeated, or one left out.
  std::string repeated = head + record(0) + record(1) + record(1);
  EXPECT_FALSE(VerifyLogBytes(repeated));
  std::string removed = head + record(0) + record(2);
  EXPECT_FALSE(VerifyLogBytes(removed));

  // Swapped and re-chained, as someone who can recompute hashes would: seq gives it away.
  auto events = ReadAllEvents(path);
  std::string rechained = head;
  Sha256Digest h = Sha256(std::string_view(head).substr(0, head.size() - 32));
  for (size_t k : {0, 2, 1}) rechained += EncodeLogRecord(h, events[k].SerializeAsString(), &h);
  v = VerifyLogBytes(rechained);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, Code::kBadRecord);
  EXPECT_EQ(v.error().seq, 2u);

  // A log's records under another sandbox's header: the header hash seeds the chain.
  std::string other = EncodeLogHeader("sb-other") + good.substr(starts[0]);
  v = VerifyLogBytes(other);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, Code::kHashMismatch);
}

TEST(EventLog, OversizedRecordsAreRefused) {
  TempDir dir;
  std::string path = dir.File("a.events");
  auto w = EventLogWriter::Open(path, kId, Fast());
  ASSERT_TRUE(w);
  Event ok;
  ok.mutable_action()->set_type("type");
  ok.mutable_action()->set_params_json(std::string(kMaxRecordPayload - 100, 'a'));
  ASSERT_TRUE((*w)->Append(ok)) << "an event just under the cap is fine";
  Event big;
  big.mutable_action()->set_type("type");
  big.mutable_action()->set_params_json(std::string(kMaxRecordPayload, 'a'));
  const uint64_t size = (*w)->size();
  auto r = (*w)->Append(big);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Code::kTooLarge);
  EXPECT_EQ(big.seq(), 0u) << "a refused event gets no seq";
  EXPECT_EQ((*w)->size(), size);
  Event next;
  next.mutable_file()->set_path("/x");
  ASSERT_TRUE((*w)->Append(next));
  EXPECT_EQ(next.seq(), 2u);
  w->reset();
  auto v = VerifyLog(path);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->count, 2u);

  // A length field over the cap is refused before anything is allocated or read.
  std::string forged = EncodeLogHeader(kId);
  for (uint32_t len : {uint32_t{0}, uint32_t{kMaxRecordPayload + 1}, uint32_t{0xffffffff}}) {
    std::string bytes =
        forged + std::string{static_cast<char>(len >> 24), static_cast<char>(len >> 16),
                             static_cast<char>(len >> 8), static_cast<char>(len)};
    auto bad = VerifyLogBytes(bytes);
    ASSERT_FALSE(bad);
    EXPECT_EQ(bad.error().code, Code::kBadLength) << len;
  }
}

TEST(EventLog, ReaderSinceSkipsButStillVerifies) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path, 3);  // 21 events
  EXPECT_EQ(ReadAllEvents(path, 0).size(), 21u);
  auto tail = ReadAllEvents(path, 15);
  ASSERT_EQ(tail.size(), 6u);
  EXPECT_EQ(tail.front().seq(), 16u);
  EXPECT_EQ(tail.back().seq(), 21u);
  EXPECT_TRUE(ReadAllEvents(path, 21).empty());
  EXPECT_TRUE(ReadAllEvents(path, 1000).empty());

  // Damage before `since` is still reported.
  std::string bytes = Slurp(path);
  bytes[RecordStarts(bytes)[2] + 8] ^= 1;
  auto r = EventLogReader::FromBytes(bytes, {.since_seq = 15});
  ASSERT_TRUE(r);
  auto e = (*r)->Next();
  ASSERT_FALSE(e);
  EXPECT_EQ(e.error().seq, 3u);
  EXPECT_FALSE((*r)->Next()) << "a failed reader stays failed";
}

TEST(EventLog, LiveReaderWaitsForARecordBeingWritten) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  const std::string full = Slurp(path);
  const size_t last = RecordStarts(full).back();
  Put(path, full.substr(0, last + 5));

  auto strict = EventLogReader::Open(path, {});
  ASSERT_TRUE(strict);
  auto live = EventLogReader::Open(path, {.live = true});
  ASSERT_TRUE(live);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE((*live)->Next().value());
  auto e = (*live)->Next();
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_FALSE(*e) << "an incomplete record is not there yet";
  for (int i = 0; i < 6; ++i) ASSERT_TRUE((*strict)->Next().value());
  EXPECT_EQ((*strict)->Next().error().code, Code::kTruncated);

  // Complete the record in place (same inode, as the writer would).
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND));
    ASSERT_TRUE(fd);
    std::string rest = full.substr(last + 5);
    ASSERT_EQ(::write(fd.get(), rest.data(), rest.size()), static_cast<ssize_t>(rest.size()));
  }
  e = (*live)->Next();
  ASSERT_TRUE(e) << e.error().message;
  ASSERT_TRUE(*e);
  EXPECT_EQ((*e)->seq(), 7u);
  EXPECT_FALSE((*live)->Next().value());
}

TEST(EventLog, LargeLogsReadTheSameFromFileAndMemory) {
  TempDir dir;
  std::string path = dir.File("a.events");
  {
    auto w = EventLogWriter::Open(path, kId, Fast());
    ASSERT_TRUE(w);
    for (int i = 0; i < 400; ++i) {
      Event e;
      e.mutable_action()->set_type("type");
      // Mostly small records, a few larger than the reader's 64 KiB window.
      size_t n = i % 50 == 7 ? 200'000 + i : 300 + i;
      e.mutable_action()->set_params_json(std::string(n, static_cast<char>('a' + i % 26)));
      ASSERT_TRUE((*w)->Append(e));
    }
  }
  auto from_file = VerifyLog(path);
  ASSERT_TRUE(from_file) << from_file.error().message;
  std::string bytes = Slurp(path);
  auto from_memory = VerifyLogBytes(bytes);
  ASSERT_TRUE(from_memory);
  EXPECT_EQ(from_file->count, 400u);
  EXPECT_EQ(from_file->head, from_memory->head);
  EXPECT_EQ(from_file->bytes, bytes.size());
  auto events = ReadAllEvents(path, 390);
  ASSERT_EQ(events.size(), 10u);
  EXPECT_EQ(events[0].action().params_json().size(), 300u + 390u);
}

TEST(EventLog, InvalidUtf8IsReplacedSoEveryRecordReadsBack) {
  TempDir dir;
  std::string path = dir.File("a.events");
  auto w = EventLogWriter::Open(path, kId, Fast());
  ASSERT_TRUE(w);
  const std::string bad = "ok\xff\xc0\x80\xed\xa0\x80\xf4\x90\x80\x80";
  for (auto e : AllKinds(kId)) {
    e.set_request_id(bad);
    e.mutable_actor()->set_id(bad);
    e.mutable_actor()->set_remote(bad);
    switch (e.kind_case()) {
      case Event::kLifecycle:
        e.mutable_lifecycle()->set_detail(bad);
        break;
      case Event::kAction:
        e.mutable_action()->set_params_json(bad);
        break;
      case Event::kViewerInput:
        e.mutable_viewer_input()->set_kind(bad);
        break;
      case Event::kCdp:
        e.mutable_cdp()->set_method(bad);
        break;
      case Event::kEgress:
        e.mutable_egress()->set_name(bad);
        break;
      case Event::kExec:
        e.mutable_exec()->add_argv(bad);
        break;
      case Event::kFile:
        e.mutable_file()->set_path(bad);
        break;
      case Event::kRecording:
        e.mutable_recording()->set_detail(bad);
        break;
      case Event::KIND_NOT_SET:
        break;
    }
    auto r = (*w)->Append(e);
    ASSERT_TRUE(r) << r.error().message;
  }
  w->reset();
  auto events = ReadAllEvents(path);
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0].actor().id().substr(0, 2), "ok");
  EXPECT_NE(events[3].cdp().method().find("\xEF\xBF\xBD"), std::string::npos);
  EXPECT_EQ(events[1].action().params_json().find('\xff'), std::string::npos);
}

TEST(EventLog, ChainContinuesAcrossReopens) {
  TempDir dir;
  std::string path = dir.File("a.events");
  for (int round = 0; round < 3; ++round) {
    auto w = EventLogWriter::Open(path, kId, {.sync = SyncPolicy::kEveryRecord});
    ASSERT_TRUE(w) << w.error().message;
    EXPECT_EQ((*w)->truncated_bytes(), 0u);
    for (auto e : AllKinds(kId)) ASSERT_TRUE((*w)->Append(e));
    EXPECT_FALSE((*w)->dirty());
  }
  auto v = VerifyLog(path);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->count, 21u);
}

TEST(EventLog, WriterChecksSandboxIds) {
  TempDir dir;
  std::string path = dir.File("a.events");
  WriteSample(path);
  auto w = EventLogWriter::Open(path, "sb-other", Fast());
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code, Code::kInvalidArgument);
  for (const char* id : {"", "../etc/passwd", ".hidden", "a/b", "sp ace"}) {
    EXPECT_FALSE(IsValidSandboxId(id)) << id;
    EXPECT_FALSE(EventLogWriter::Open(dir.File("x.events"), id, Fast())) << id;
  }
  EXPECT_TRUE(IsValidSandboxId("sb-0123456789abcdef"));
  EXPECT_FALSE(IsValidSandboxId(std::string(129, 'a')));
  EXPECT_TRUE(IsValidSandboxId(std::string(128, 'a')));
}

TEST(EventLog, HeaderProblemsHaveTheirOwnCodes) {
  std::string header = EncodeLogHeader(kId);
  auto code_of = [](std::string_view bytes) { return VerifyLogBytes(bytes).error().code; };
  EXPECT_EQ(code_of("hello world, this is not a log at all"), Code::kBadHeader);
  EXPECT_EQ(code_of(""), Code::kTruncated);
  EXPECT_EQ(code_of(std::string_view(header).substr(0, 30)), Code::kTruncated);
  std::string v2 = header;
  v2[11] = 2;
  EXPECT_EQ(code_of(v2), Code::kIncompatible);
  std::string long_id = header;
  long_id[14] = 1;
  EXPECT_EQ(code_of(long_id), Code::kBadHeader);
  EXPECT_EQ(VerifyLog("/nonexistent/x.events").error().code, Code::kNotFound);
}

}  // namespace
}  // namespace deskbox::recorder

namespace deskbox::recorder {
namespace {

TEST(EventLog, RecordingEventsRoundTripAndHaveTheirStringsSanitized) {
  testing::TempDir dir;
  std::string path = dir.File("rec.events");
  {
    auto w = EventLogWriter::Open(path, "sb-rec", {});
    ASSERT_TRUE(w) << w.error().message;
    Event e = testing::RecordingSegmentEvent("sb-rec");
    ASSERT_TRUE((*w)->Append(e));
    Event bad = testing::RecordingSegmentEvent("sb-rec");
    bad.mutable_recording()->set_detail("disk \xff full");
    ASSERT_TRUE((*w)->Append(bad));
  }
  auto r = EventLogReader::Open(path, {});
  ASSERT_TRUE(r) << r.error().message;
  auto first = (*r)->Next();
  ASSERT_TRUE(first && *first);
  const auto& k = (*first)->recording();
  EXPECT_EQ(k.phase(), "segment");
  EXPECT_EQ(k.index(), 3u);
  EXPECT_EQ(k.sha256(), std::string(64, 'a'));
  EXPECT_EQ(k.end_unix_ms() - k.start_unix_ms(), 60000);
  EXPECT_TRUE(k.truncated());
  auto second = (*r)->Next();
  ASSERT_TRUE(second && *second);
  EXPECT_EQ((*second)->recording().detail(), "disk \xEF\xBF\xBD full");
}

}  // namespace
}  // namespace deskbox::recorder
