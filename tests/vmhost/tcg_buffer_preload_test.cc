// The translation-cache preload (vmhost/src/tcg_buffer_preload.cc) run in a real process: the
// probe allocates like QEMU does, with the library preloaded as the jailer preloads it.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

extern char** environ;

namespace {

struct Run {
  int status = -1;
  std::string out, err;
};

Run Probe(const std::vector<std::string>& sizes, const std::vector<std::string>& env) {
  std::vector<std::string> argv = {DESKBOX_TCG_BUFFER_PROBE};
  argv.insert(argv.end(), sizes.begin(), sizes.end());
  std::vector<char*> a, e;
  for (auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
  a.push_back(nullptr);
  std::vector<std::string> envs = env;
  for (auto& s : envs) e.push_back(s.data());
  e.push_back(nullptr);
  int out[2], err[2];
  EXPECT_EQ(pipe(out), 0);
  EXPECT_EQ(pipe(err), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  pid_t pid;
  Run r;
  if (posix_spawn(&pid, a[0], &fa, nullptr, a.data(), e.data()) != 0) return r;
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);
  close(err[1]);
  auto drain = [](int fd) {
    std::string s;
    char buf[4096];
    for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) s.append(buf, static_cast<size_t>(n));
    close(fd);
    return s;
  };
  r.out = drain(out[0]);
  r.err = drain(err[0]);
  waitpid(pid, &r.status, 0);
  return r;
}

class TcgBufferPreload : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tcgbuf-test-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::vector<std::string> Env(const std::string& bytes) const {
    return {std::string("LD_PRELOAD=") + DESKBOX_TCG_BUFFER_LIB, "DESKBOX_TCG_BUFFER_DIR=" + dir_.string(),
            "DESKBOX_TCG_BUFFER_BYTES=" + bytes};
  }
  size_t FilesLeft() const {
    return static_cast<size_t>(std::distance(std::filesystem::directory_iterator(dir_), {}));
  }
  std::filesystem::path dir_;
};

constexpr const char* k32MiB = "33554432";

TEST_F(TcgBufferPreload, TheCacheSizedMappingBecomesAnUnnamedFileWithoutReadaheadOrHugePages) {
  auto r = Probe({k32MiB}, Env(k32MiB));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("rwxs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(dir_.string() + "/#"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(deleted)"), std::string::npos) << r.out;
  auto flags = r.out.substr(r.out.find("flags "));
  EXPECT_NE(flags.find(" rr"), std::string::npos) << "random-read advice missing: " << flags;
  EXPECT_EQ(flags.find(" hg"), std::string::npos) << "huge-page advice kept: " << flags;
  EXPECT_NE(r.err.find("file-backed"), std::string::npos) << r.err;
  EXPECT_EQ(FilesLeft(), 0u) << "the file outlived the process";
}

TEST_F(TcgBufferPreload, OnlyTheFirstMatchingMappingIsTaken) {
  auto r = Probe({k32MiB, k32MiB}, Env(k32MiB));
  ASSERT_EQ(r.status, 0) << r.err;
  auto second = r.out.find("map ", r.out.find("map ") + 1);
  ASSERT_NE(second, std::string::npos) << r.out;
  EXPECT_NE(r.out.substr(0, second).find("rwxs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.substr(second).find("rwxp"), std::string::npos) << r.out;
}

TEST_F(TcgBufferPreload, OtherSizesStayAnonymous) {
  auto r = Probe({"16777216"}, Env(k32MiB));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("rwxp"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(dir_.string()), std::string::npos) << r.out;
  auto flags = r.out.substr(r.out.find("flags "));
  EXPECT_NE(flags.find(" hg"), std::string::npos) << "advice on other mappings must pass through: " << flags;
}

TEST_F(TcgBufferPreload, ADirectoryThatCannotHoldTheFileLeavesTheCacheAnonymousAndSaysWhy) {
  auto env = Env(k32MiB);
  env[1] = "DESKBOX_TCG_BUFFER_DIR=" + (dir_ / "missing").string();
  auto r = Probe({k32MiB}, env);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("rwxp"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("stays anonymous"), std::string::npos) << r.err;
}

TEST_F(TcgBufferPreload, WithoutItsSettingsItDoesNothing) {
  auto r = Probe({k32MiB}, {std::string("LD_PRELOAD=") + DESKBOX_TCG_BUFFER_LIB});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("rwxp"), std::string::npos) << r.out;
  EXPECT_TRUE(r.err.empty()) << r.err;
}

}  // namespace
