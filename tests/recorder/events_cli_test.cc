// deskbox-events, run as a program: exit codes and output.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.h"
#include "common/sha256.h"
#include "recorder/event_log.h"
#include "recorder_test_util.h"

namespace deskbox::recorder {
namespace {

using testing::AllKinds;
using testing::TempDir;

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

CliResult Events(const TempDir& dir, const std::string& args) {
  std::string out = dir.File("stdout"), err = dir.File("stderr");
  std::string cmd = std::string(DESKBOX_EVENTS_BIN) + " " + args + " >" + out + " 2>" + err;
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFile(out, 1 << 20).value_or("");
  r.err = ReadFile(err, 1 << 20).value_or("");
  return r;
}

std::string MakeLog(const TempDir& dir) {
  std::string path = dir.File("sb-1.events");
  auto w = EventLogWriter::Open(path, "sb-1", {});
  EXPECT_TRUE(w);
  for (auto e : AllKinds("sb-1")) EXPECT_TRUE((*w)->Append(e));
  return path;
}

TEST(EventsCli, VerifyPrintsCountAndHead) {
  TempDir dir;
  std::string path = MakeLog(dir);
  auto v = VerifyLog(path);
  ASSERT_TRUE(v);
  CliResult r = Events(dir, "verify " + path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ok: 7 events, head " + ToHex(v->head) + "\n");
}

TEST(EventsCli, VerifyNamesTheBadRecord) {
  TempDir dir;
  std::string path = MakeLog(dir);
  std::string bytes = ReadFile(path, 1 << 20).value();
  bytes[bytes.size() - 40] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(path, bytes, 0640));
  auto v = VerifyLog(path);
  ASSERT_FALSE(v);
  CliResult r = Events(dir, "verify " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("offset " + std::to_string(v.error().offset)), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(seq 7)"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());
}

TEST(EventsCli, DumpWritesJsonLines) {
  TempDir dir;
  std::string path = MakeLog(dir);
  CliResult r = Events(dir, "dump " + path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  uint64_t seq = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["seq"], ++seq);
  }
  EXPECT_EQ(seq, 7u);

  r = Events(dir, "dump " + path + " --since 5");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2);
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["seq"], 6);
}

TEST(EventsCli, DumpStopsAtDamageWithExitOne) {
  TempDir dir;
  std::string path = MakeLog(dir);
  std::string bytes = ReadFile(path, 1 << 20).value();
  ASSERT_TRUE(WriteFileAtomic(path, bytes.substr(0, bytes.size() - 10), 0640));
  CliResult r = Events(dir, "dump " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 6);
  EXPECT_NE(r.err.find("truncated"), std::string::npos) << r.err;
}

TEST(EventsCli, UsageAndMissingFiles) {
  TempDir dir;
  EXPECT_EQ(Events(dir, "").exit_code, 2);
  EXPECT_EQ(Events(dir, "frobnicate x").exit_code, 2);
  EXPECT_EQ(Events(dir, "dump x --since nope").exit_code, 2);
  EXPECT_EQ(Events(dir, "verify " + dir.File("missing.events")).exit_code, 2);
}

}  // namespace
}  // namespace deskbox::recorder

namespace deskbox::recorder {
namespace {

TEST(EventsCli, VerifyWithARecordingChecksEverySegmentFile) {
  testing::TempDir dir;
  std::string path = dir.File("sb-1.events");
  std::string segments = dir.File("rec");
  ASSERT_EQ(::mkdir(segments.c_str(), 0750), 0);
  const std::string video = "not really H.264, but bytes the log hashes";
  {
    auto w = EventLogWriter::Open(path, "sb-1", {});
    ASSERT_TRUE(w);
    Event e = testing::RecordingSegmentEvent("sb-1");
    e.mutable_recording()->set_index(0);
    e.mutable_recording()->set_bytes(video.size());
    e.mutable_recording()->set_sha256(ToHex(Sha256(video)));
    ASSERT_TRUE((*w)->Append(e));
  }
  ASSERT_TRUE(WriteFileAtomic(segments + "/000000.mp4", video, 0640));
  CliResult ok = Events(dir, "verify " + path + " --recording " + segments);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out.rfind("ok: 1 events, 1 segments, head ", 0), 0u) << ok.out;

  std::string changed = video;
  changed[3] ^= 1;
  ASSERT_TRUE(WriteFileAtomic(segments + "/000000.mp4", changed, 0640));
  CliResult bad = Events(dir, "verify " + path + " --recording " + segments);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("segment_modified: 000000.mp4: SHA-256"), std::string::npos) << bad.err;

  CliResult missing = Events(dir, "verify " + dir.File("none.events") + " --recording " + segments);
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_EQ(Events(dir, "verify " + path + " --recording").exit_code, 2);
}

}  // namespace
}  // namespace deskbox::recorder
