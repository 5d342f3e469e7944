// FileRead streaming and FileWrite sessions, in a temp dir per test.
#include "agent/file_transfer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent_fakes.h"

namespace deskbox::agent {
namespace {

using namespace std::chrono_literals;
using testing::ListDir;
using testing::RandomBytes;
using testing::ReadFileOrDie;
using testing::WriteFileOrDie;

pb::FileReadRequest ReadRequest(const std::string& path, uint32_t chunk = 0) {
  pb::FileReadRequest r;
  r.set_path(path);
  r.set_chunk_bytes(chunk);
  return r;
}

// Reassembles a FileChunk stream, checking offsets and that only the last chunk is final.
std::string Reassemble(const std::vector<pb::Response>& responses, uint64_t id) {
  std::string data;
  for (size_t i = 0; i < responses.size(); ++i) {
    const auto& r = responses[i];
    EXPECT_EQ(r.id(), id);
    EXPECT_TRUE(r.has_file_chunk());
    EXPECT_EQ(r.file_chunk().offset(), data.size());
    EXPECT_EQ(r.file_chunk().final(), i + 1 == responses.size());
    data += r.file_chunk().data();
  }
  return data;
}

TEST(AgentFileRead, ChunksWithOffsetsAndFinal) {
  testing::TempDir dir;
  for (size_t size : {size_t{1}, size_t{1000}, size_t{4096}, size_t{4097}, size_t{12288},
                      size_t{300000}}) {
    const std::string content = RandomBytes(size, size);
    const std::string path = dir.File("f" + std::to_string(size));
    WriteFileOrDie(path, content);
    testing::ReplyRecorder rec;
    EXPECT_EQ(StreamFile(7, ReadRequest(path, 4096), FileLimits{}, rec.reply()), size);
    auto responses = rec.responses();
    EXPECT_EQ(responses.size(), std::max<size_t>(1, (size + 4095) / 4096)) << size;
    EXPECT_EQ(Reassemble(responses, 7), content);
    for (const auto& r : responses) {
      EXPECT_LE(r.file_chunk().data().size(), 4096u);
      EXPECT_EQ(r.file_chunk().total_size(), size);
    }
  }
}

TEST(AgentFileRead, EmptyFileIsOneEmptyFinalChunk) {
  testing::TempDir dir;
  WriteFileOrDie(dir.File("empty"), "");
  testing::ReplyRecorder rec;
  StreamFile(1, ReadRequest(dir.File("empty")), FileLimits{}, rec.reply());
  auto responses = rec.responses();
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_TRUE(responses[0].file_chunk().final());
  EXPECT_TRUE(responses[0].file_chunk().data().empty());
  EXPECT_EQ(responses[0].file_chunk().offset(), 0u);
}

TEST(AgentFileRead, DefaultChunkAndProcFiles) {
  testing::ReplyRecorder rec;
  // /proc files report size 0 but have content: read to EOF.
  StreamFile(1, ReadRequest("/proc/self/status"), FileLimits{}, rec.reply());
  auto responses = rec.responses();
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_NE(responses[0].file_chunk().data().find("Name:"), std::string::npos);
  EXPECT_TRUE(responses[0].file_chunk().final());
}

TEST(AgentFileRead, Rejections) {
  testing::TempDir dir;
  WriteFileOrDie(dir.File("big"), std::string(5000, 'x'));
  ASSERT_EQ(::mkfifo(dir.File("fifo").c_str(), 0600), 0);
  FileLimits small;
  small.max_file_bytes = 4000;
  struct Case {
    std::string path;
    uint32_t chunk;
    pb::Error::Code code;
  } cases[] = {
      {"relative/path", 0, pb::Error::INVALID_ARGUMENT},
      {"", 0, pb::Error::INVALID_ARGUMENT},
      {std::string("/tmp/a\0b", 8), 0, pb::Error::INVALID_ARGUMENT},
      {"/" + std::string(5000, 'a'), 0, pb::Error::INVALID_ARGUMENT},
      {dir.File("missing"), 0, pb::Error::NOT_FOUND},
      {dir.path(), 0, pb::Error::INVALID_ARGUMENT},        // a directory
      {dir.File("fifo"), 0, pb::Error::INVALID_ARGUMENT},  // not regular, and no hang
      {"/dev/null", 0, pb::Error::INVALID_ARGUMENT},
      {dir.File("big"), 0, pb::Error::TOO_LARGE},
      {dir.File("big"), (1u << 20) + 1, pb::Error::INVALID_ARGUMENT},
  };
  for (const auto& c : cases) {
    testing::ReplyRecorder rec;
    StreamFile(3, ReadRequest(c.path, c.chunk), small, rec.reply());
    auto responses = rec.responses();
    ASSERT_EQ(responses.size(), 1u) << c.path.substr(0, 80);
    ASSERT_TRUE(responses[0].has_error()) << c.path.substr(0, 80);
    EXPECT_EQ(responses[0].error().code(), c.code) << c.path.substr(0, 80) << ": "
                                                   << responses[0].error().message();
    EXPECT_EQ(responses[0].id(), 3u);
  }
}

TEST(AgentFileRead, StopsWhenTheHostIsGone) {
  testing::TempDir dir;
  WriteFileOrDie(dir.File("f"), std::string(100000, 'x'));
  testing::ReplyRecorder rec;
  StreamFile(1, ReadRequest(dir.File("f"), 1000), FileLimits{}, rec.reply(/*delivered=*/false));
  EXPECT_EQ(rec.responses().size(), 1u);
}

struct FileWriteFixture : ::testing::Test {
  testing::FakeClock clock;
  InlineTaskRunner tasks;
  testing::TempDir dir;
  FileLimits limits;

  static pb::FileWriteChunk Chunk(const std::string& path, uint64_t offset, std::string data,
                                  bool last, uint32_t mode = 0) {
    pb::FileWriteChunk c;
    c.set_path(path);
    c.set_offset(offset);
    c.set_data(std::move(data));
    c.set_last(last);
    c.set_mode(mode);
    return c;
  }
};

TEST_F(FileWriteFixture, ChunksThenRename) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  const std::string path = dir.File("out.bin");
  const std::string content = RandomBytes(250000, 3);
  for (size_t off = 0; off < content.size(); off += 100000) {
    const bool last = off + 100000 >= content.size();
    writer.HandleChunk(5, Chunk(path, off, content.substr(off, 100000), last, 0600), rec.reply());
    if (!last) {
      EXPECT_TRUE(rec.responses().empty()) << "no answer before the last chunk";
      EXPECT_NE(::access(path.c_str(), F_OK), 0) << "not visible before the last chunk";
    }
  }
  auto responses = rec.responses();
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_TRUE(responses[0].has_ack()) << responses[0].error().message();
  EXPECT_EQ(ReadFileOrDie(path), content);
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(ListDir(dir.path()), std::vector<std::string>{"out.bin"}) << "temp file left";
  EXPECT_EQ(writer.active_sessions(), 0u);
}

TEST_F(FileWriteFixture, EmptyFileAndDefaultMode) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  writer.HandleChunk(1, Chunk(dir.File("empty"), 0, "", true), rec.reply());
  ASSERT_TRUE(rec.responses().at(0).has_ack());
  struct stat st{};
  ASSERT_EQ(::stat(dir.File("empty").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);
}

TEST_F(FileWriteFixture, ReplacingKeepsModeUnlessGiven) {
  const std::string path = dir.File("script.sh");
  WriteFileOrDie(path, "old");
  ::chmod(path.c_str(), 0750);
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  writer.HandleChunk(1, Chunk(path, 0, "new", true), rec.reply());
  ASSERT_TRUE(rec.responses().at(0).has_ack());
  EXPECT_EQ(ReadFileOrDie(path), "new");
  struct stat st{};
  ::stat(path.c_str(), &st);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
}

TEST_F(FileWriteFixture, CreateParents) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  const std::string path = dir.File("a/b/c/file.txt");
  writer.HandleChunk(1, Chunk(path, 0, "x", true), rec.reply());
  ASSERT_TRUE(rec.responses().at(0).has_error());
  EXPECT_EQ(rec.responses().at(0).error().code(), pb::Error::NOT_FOUND);
  auto chunk = Chunk(path, 0, "x", true);
  chunk.set_create_parents(true);
  writer.HandleChunk(2, chunk, rec.reply());
  ASSERT_TRUE(rec.responses().at(1).has_ack()) << rec.responses().at(1).error().message();
  EXPECT_EQ(ReadFileOrDie(path), "x");
}

TEST_F(FileWriteFixture, OffsetGapFailsOnceAndDiscards) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  const std::string path = dir.File("gap");
  writer.HandleChunk(9, Chunk(path, 0, "abc", false), rec.reply());
  writer.HandleChunk(9, Chunk(path, 5, "def", false), rec.reply());  // expected offset 3
  writer.HandleChunk(9, Chunk(path, 8, "ghi", false), rec.reply());  // dropped quietly
  writer.HandleChunk(9, Chunk(path, 11, "jkl", true), rec.reply());  // dropped quietly
  auto responses = rec.responses();
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].error().code(), pb::Error::INVALID_ARGUMENT);
  EXPECT_TRUE(ListDir(dir.path()).empty()) << "temp file not discarded";
  // A new id for the same path starts over.
  writer.HandleChunk(10, Chunk(path, 0, "fresh", true), rec.reply());
  ASSERT_EQ(rec.responses().size(), 2u);
  EXPECT_TRUE(rec.responses()[1].has_ack());
  EXPECT_EQ(ReadFileOrDie(path), "fresh");
}

TEST_F(FileWriteFixture, PathChangeAndBadFirstChunks) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  writer.HandleChunk(1, Chunk(dir.File("a"), 0, "x", false), rec.reply());
  writer.HandleChunk(1, Chunk(dir.File("b"), 1, "y", true), rec.reply());
  writer.HandleChunk(2, Chunk("relative", 0, "x", true), rec.reply());
  writer.HandleChunk(3, Chunk(dir.File("c"), 4, "x", true), rec.reply());  // no session
  writer.HandleChunk(4, Chunk(dir.path(), 0, "x", true), rec.reply());     // a directory
  writer.HandleChunk(5, Chunk(dir.path() + "/", 0, "x", true), rec.reply());
  writer.HandleChunk(6, Chunk(dir.File("m"), 0, "x", true, 010000), rec.reply());
  writer.HandleChunk(7, Chunk(dir.File("missing-dir/f"), 0, "x", true), rec.reply());
  auto responses = rec.responses();
  ASSERT_EQ(responses.size(), 7u);
  const pb::Error::Code want[] = {pb::Error::INVALID_ARGUMENT, pb::Error::INVALID_ARGUMENT,
                                  pb::Error::INVALID_ARGUMENT, pb::Error::INVALID_ARGUMENT,
                                  pb::Error::INVALID_ARGUMENT, pb::Error::INVALID_ARGUMENT,
                                  pb::Error::NOT_FOUND};
  for (size_t i = 0; i < responses.size(); ++i) {
    EXPECT_EQ(responses[i].error().code(), want[i]) << i << ": " << responses[i].error().message();
  }
  EXPECT_TRUE(ListDir(dir.path()).empty());
}

TEST_F(FileWriteFixture, SizeLimits) {
  limits.max_file_bytes = 10;
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  writer.HandleChunk(1, Chunk(dir.File("a"), 0, "123456", false), rec.reply());
  writer.HandleChunk(1, Chunk(dir.File("a"), 6, "78901", true), rec.reply());
  writer.HandleChunk(2, Chunk(dir.File("b"), 0, std::string((1u << 20) + 1, 'x'), true),
                     rec.reply());
  auto responses = rec.responses();
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[0].error().code(), pb::Error::TOO_LARGE);
  EXPECT_EQ(responses[1].error().code(), pb::Error::TOO_LARGE);
  EXPECT_TRUE(ListDir(dir.path()).empty());
}

TEST_F(FileWriteFixture, AbandonedWritesExpire) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  writer.HandleChunk(1, Chunk(dir.File("slow"), 0, "abc", false), rec.reply());
  clock.Advance(59s);
  writer.ExpireIdle();
  EXPECT_EQ(writer.active_sessions(), 1u);
  writer.HandleChunk(1, Chunk(dir.File("slow"), 3, "def", false), rec.reply());
  clock.Advance(59s);
  writer.ExpireIdle();
  EXPECT_EQ(writer.active_sessions(), 1u) << "each chunk restarts the idle clock";
  clock.Advance(2s);
  writer.ExpireIdle();
  EXPECT_EQ(writer.active_sessions(), 0u);
  ASSERT_EQ(rec.responses().size(), 1u);
  EXPECT_EQ(rec.responses()[0].error().code(), pb::Error::TIMEOUT);
  EXPECT_TRUE(ListDir(dir.path()).empty());
  // A late chunk of the expired id is dropped without another answer.
  writer.HandleChunk(1, Chunk(dir.File("slow"), 6, "ghi", true), rec.reply());
  EXPECT_EQ(rec.responses().size(), 1u);
}

TEST_F(FileWriteFixture, DisconnectDiscardsEverything) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  writer.HandleChunk(1, Chunk(dir.File("x"), 0, "abc", false), rec.reply());
  writer.HandleChunk(2, Chunk(dir.File("y"), 0, "abc", false), rec.reply());
  EXPECT_EQ(ListDir(dir.path()).size(), 2u);
  writer.DiscardAll();
  EXPECT_TRUE(ListDir(dir.path()).empty());
  EXPECT_TRUE(rec.responses().empty());
}

TEST_F(FileWriteFixture, SessionLimit) {
  limits.max_write_sessions = 2;
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  writer.HandleChunk(1, Chunk(dir.File("1"), 0, "a", false), rec.reply());
  writer.HandleChunk(2, Chunk(dir.File("2"), 0, "a", false), rec.reply());
  writer.HandleChunk(3, Chunk(dir.File("3"), 0, "a", false), rec.reply());
  ASSERT_EQ(rec.responses().size(), 1u);
  EXPECT_EQ(rec.responses()[0].id(), 3u);
  EXPECT_TRUE(rec.responses()[0].has_error());
}

TEST_F(FileWriteFixture, LongNamesStillGetATempFile) {
  FileWriter writer(clock, tasks, limits);
  testing::ReplyRecorder rec;
  const std::string path = dir.File(std::string(255, 'n'));
  writer.HandleChunk(1, Chunk(path, 0, "x", true), rec.reply());
  ASSERT_TRUE(rec.responses().at(0).has_ack()) << rec.responses().at(0).error().message();
}

}  // namespace
}  // namespace deskbox::agent
