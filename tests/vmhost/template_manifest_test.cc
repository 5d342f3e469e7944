#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "vmhost/template.h"

namespace deskbox::vmhost {
namespace {

v1::TemplateManifest Sample() {
  v1::TemplateManifest m;
  m.set_format_version(kManifestFormatVersion);
  m.set_name("desktop");
  m.set_qemu_version("10.0.2");
  m.set_cpu_model("Nehalem");
  m.set_memory_mib(2048);
  m.set_smp(2);
  m.set_screen_width(1280);
  m.set_screen_height(800);
  return m;
}

TEST(TemplateManifest, RoundTrips) {
  auto bytes = EncodeManifest(Sample());
  auto m = DecodeManifest(bytes);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->cpu_model(), "Nehalem");
  EXPECT_EQ(m->screen_width(), 1280u);
}

TEST(TemplateManifest, EveryFlippedByteIsDetected) {
  auto bytes = EncodeManifest(Sample());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] ^= 0x01;
    EXPECT_FALSE(DecodeManifest(bad)) << "flip at byte " << i << " went unnoticed";
  }
}

TEST(TemplateManifest, TruncationAndOversizeAreRefused) {
  auto bytes = EncodeManifest(Sample());
  for (size_t len = 0; len < bytes.size(); ++len) EXPECT_FALSE(DecodeManifest(bytes.substr(0, len)));
  std::string big = bytes;
  big[12] = 0x7f;  // payload length far over the cap
  auto r = DecodeManifest(big);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, TemplateError::Code::kCorrupt);
}

TEST(TemplateManifest, NewerFormatVersionIsIncompatible) {
  auto bytes = EncodeManifest(Sample());
  bytes[11] = 2;
  auto r = DecodeManifest(bytes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, TemplateError::Code::kIncompatible);
}

class TemplateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("deskbox-tpl-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    for (const char* f : {kDiskFile, kRamFile, kStateFile}) {
      std::ofstream(dir_ / f) << "contents of " << f;
    }
    std::filesystem::resize_file(dir_ / kRamFile, 1 << 20);  // the guest's 1 MiB of RAM
  }
  void TearDown() override {
    std::filesystem::permissions(dir_, std::filesystem::perms::owner_all);
    std::filesystem::remove_all(dir_);
  }
  std::expected<void, TemplateError> Seal() {
    auto m = Sample();
    m.set_memory_mib(1);
    for (const char* f : {kDiskFile, kRamFile, kStateFile}) m.add_files()->set_name(f);
    return SealTemplate(dir_.string(), m);
  }
  std::filesystem::path dir_;
};

TEST_F(TemplateDirTest, SealedTemplateVerifies) {
  ASSERT_TRUE(Seal());
  auto m = OpenTemplate(dir_.string(), VerifyMode::kFull);
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->files_size(), 3);
  struct stat st;
  ASSERT_EQ(::stat((dir_ / kRamFile).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0444u);
}

TEST_F(TemplateDirTest, ChangedContentIsRefusedByFullCheck) {
  ASSERT_TRUE(Seal());
  std::filesystem::permissions(dir_ / kStateFile, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  {
    std::fstream f(dir_ / kStateFile, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(0);
    f.put('X');
  }
  std::filesystem::permissions(dir_ / kStateFile, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::remove);
  EXPECT_TRUE(OpenTemplate(dir_.string(), VerifyMode::kQuick));  // same size
  auto r = OpenTemplate(dir_.string(), VerifyMode::kFull);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, TemplateError::Code::kMismatch);
  EXPECT_NE(r.error().message.find("state"), std::string::npos) << r.error().message;
}

TEST_F(TemplateDirTest, MissingOrResizedFileIsRefused) {
  ASSERT_TRUE(Seal());
  std::filesystem::permissions(dir_ / kRamFile, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  std::filesystem::resize_file(dir_ / kRamFile, 1);
  std::filesystem::permissions(dir_ / kRamFile, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::remove);
  auto r = OpenTemplate(dir_.string(), VerifyMode::kQuick);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("size"), std::string::npos);
  std::filesystem::remove(dir_ / kRamFile);
  r = OpenTemplate(dir_.string(), VerifyMode::kQuick);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, TemplateError::Code::kNotFound);
}

TEST_F(TemplateDirTest, DirectoryWithoutManifestIsNotATemplate) {
  auto r = OpenTemplate(dir_.string(), VerifyMode::kQuick);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, TemplateError::Code::kNotFound);
  EXPECT_NE(r.error().message.find("no manifest"), std::string::npos);
}

TEST_F(TemplateDirTest, RamFileMustHoldAllOfTheGuestsMemory) {
  std::filesystem::resize_file(dir_ / kRamFile, 4096);
  auto m = Sample();
  m.set_memory_mib(1);
  for (const char* f : {kDiskFile, kRamFile, kStateFile}) m.add_files()->set_name(f);
  ASSERT_TRUE(SealTemplate(dir_.string(), m));  // consistent with itself ...
  auto r = OpenTemplate(dir_.string(), VerifyMode::kQuick);
  ASSERT_FALSE(r);  // ... but too short for the guest
  EXPECT_NE(r.error().message.find("MiB of RAM"), std::string::npos) << r.error().message;
}

TEST_F(TemplateDirTest, WritableFileIsRefused) {
  ASSERT_TRUE(Seal());
  std::filesystem::permissions(dir_ / kDiskFile, std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  auto r = OpenTemplate(dir_.string(), VerifyMode::kQuick);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("writable"), std::string::npos);
}

}  // namespace
}  // namespace deskbox::vmhost
