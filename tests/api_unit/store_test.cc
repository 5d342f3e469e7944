// Store: migration from the databases older releases left (tests/api_unit/data), the online
// backup, and what a full state disk does to a write (FullDiskVfs: SQLITE_FULL as ENOSPC gives
// it, without a disk).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "api/store.h"
#include "full_disk_vfs.h"

namespace deskbox::api {
namespace {

namespace fs = std::filesystem;
using testing::FullDiskVfs;
using vmhost::SandboxState;

fs::path TempDir(const std::string& name) {
  auto dir = fs::temp_directory_path() /
             ("deskbox-store-" + std::to_string(::getpid()) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A raw connection, for what the Store does not show (the version, the schema cookie, checks).
class Raw {
 public:
  explicit Raw(const std::string& path) {
    EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK) << path;
  }
  ~Raw() { sqlite3_close(db_); }
  std::string Text(const char* sql) {
    sqlite3_stmt* s = nullptr;
    std::string out;
    if (sqlite3_prepare_v2(db_, sql, -1, &s, nullptr) == SQLITE_OK && sqlite3_step(s) == SQLITE_ROW &&
        sqlite3_column_text(s, 0))
      out = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    else
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
    sqlite3_finalize(s);
    return out;
  }
  int64_t Int(const char* sql) { return std::stoll(Text(sql)); }
  void Exec(const char* sql) { EXPECT_EQ(sqlite3_exec(db_, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sql; }
  // Every row of the three tables, as text, in a fixed order.
  std::string Dump() {
    std::string out;
    for (const char* sql : {"SELECT * FROM sandboxes ORDER BY id", "SELECT * FROM api_keys ORDER BY id",
                            "SELECT * FROM tokens ORDER BY id", "SELECT * FROM schema_version"}) {
      sqlite3_stmt* s = nullptr;
      EXPECT_EQ(sqlite3_prepare_v2(db_, sql, -1, &s, nullptr), SQLITE_OK) << sql;
      while (sqlite3_step(s) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(s); ++i) {
          auto* t = sqlite3_column_text(s, i);
          out += t ? reinterpret_cast<const char*>(t) : "NULL";
          out += '|';
        }
        out += '\n';
      }
      sqlite3_finalize(s);
    }
    return out;
  }

 private:
  sqlite3* db_ = nullptr;
};

// ---- Migration: each older schema version, as its release wrote it ----

class StoreMigrationTest : public ::testing::TestWithParam<int> {};

TEST_P(StoreMigrationTest, OpensTheDatabaseOfAnOlderReleaseAndKeepsEveryRow) {
  const int from = GetParam();
  auto dir = TempDir("migrate-v" + std::to_string(from));
  std::string path = (dir / kStateDatabase).string();
  fs::copy_file(fs::path(DESKBOX_STATE_FIXTURES) / ("state-v" + std::to_string(from) + ".db"), path);
  {
    Raw before(path);
    ASSERT_EQ(before.Int("SELECT version FROM schema_version"), from);
  }
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store) << store.error();
    auto sandboxes = (*store)->LoadSandboxes();
    ASSERT_TRUE(sandboxes) << sandboxes.error().message;
    ASSERT_EQ(sandboxes->size(), 5u);
    const SandboxState states[] = {SandboxState::kRunning, SandboxState::kPaused, SandboxState::kStopped,
                                   SandboxState::kFailed, SandboxState::kRunning};
    for (size_t i = 0; i < sandboxes->size(); ++i) {
      const SandboxRecord& r = sandboxes->at(i);
      SCOPED_TRACE(r.id);
      EXPECT_EQ(r.id, fmt::format("sb-{:016x}", i + 1));
      EXPECT_EQ(r.state, states[i]);
      EXPECT_EQ(r.template_name, "desktop@d272c1217146c6cf");
      EXPECT_EQ(r.slot, i + 1);
      EXPECT_EQ(r.created_at_ms, 1764400000000 + int64_t(i + 1) * 1000);
      EXPECT_EQ(r.owner, "key_00000000000000a1");
      // recording came with version 4 (the fixture's second sandbox is not recorded), limits
      // with 5: before that, their defaults.
      EXPECT_EQ(r.recording, !(from >= 4 && i == 1));
      EXPECT_EQ(r.cpu_weight, 0u);
      EXPECT_EQ(r.cpu_max_millis, 0u);
    }
    EXPECT_EQ(sandboxes->at(1).on_timeout, "stop");
    EXPECT_EQ(sandboxes->at(1).egress_json, "");
    EXPECT_EQ(sandboxes->at(0).egress_json, R"({"allow":["example.com"],"default":"deny","deny":[]})");
    EXPECT_EQ(sandboxes->at(0).metadata_json, R"({"job":"fixture-1"})");
    EXPECT_EQ(sandboxes->at(0).expires_at_ms, 1764400000000 + 1000 + 3600000);
    EXPECT_EQ(sandboxes->at(2).stopped_at_ms, 1764400000000 + 3000 + 900);
    EXPECT_EQ(sandboxes->at(3).failure, "QEMU exited with status 1");
    EXPECT_EQ(sandboxes->at(3).width, 1920u);
    EXPECT_EQ(sandboxes->at(4).create_path, "cold");
    EXPECT_DOUBLE_EQ(sandboxes->at(4).create_ms, 66.5);
    // display came with version 2, browser_refreshing with 3; before that, their defaults.
    EXPECT_EQ(sandboxes->at(4).display_w, from >= 2 ? 1024u : 0u);
    EXPECT_EQ(sandboxes->at(4).display_h, from >= 2 ? 768u : 0u);
    EXPECT_EQ(sandboxes->at(4).browser_refreshing, from >= 3);
    EXPECT_EQ(sandboxes->at(0).display_w, 0u);
    EXPECT_FALSE(sandboxes->at(0).browser_refreshing);

    auto keys = (*store)->LoadKeys();
    ASSERT_TRUE(keys);
    ASSERT_EQ(keys->size(), 2u);
    EXPECT_EQ(keys->at(0).name, "bootstrap");
    std::string bootstrap = "dbk_";
    for (int i = 0; i < 32; ++i) bootstrap += "a1";
    EXPECT_EQ(keys->at(0).hash, Sha256(bootstrap));
    EXPECT_EQ(keys->at(0).revoked_at_ms, 0);
    EXPECT_EQ(keys->at(1).revoked_at_ms, 1764400000020);

    auto tokens = (*store)->LoadTokens();
    ASSERT_TRUE(tokens);
    ASSERT_EQ(tokens->size(), 3u);
    const char* scopes[] = {"view", "control", "cdp"};
    for (size_t i = 0; i < tokens->size(); ++i) {
      EXPECT_EQ(tokens->at(i).scope, scopes[i]);
      EXPECT_EQ(tokens->at(i).sandbox_id, "sb-0000000000000001");
      EXPECT_EQ(tokens->at(i).hash, Sha256(fmt::format("dbt_{:064x}", i + 1)));
    }
    EXPECT_EQ(tokens->at(1).revoked_at_ms, 1764400000200);
    EXPECT_TRUE(*(*store)->TokenExists("tok_00000000000000b3"));
  }
  Raw after(path);
  EXPECT_EQ(after.Int("SELECT version FROM schema_version"), kSchemaVersion);
  EXPECT_EQ(after.Int("SELECT count(*) FROM schema_version"), 1);
  EXPECT_EQ(after.Text("PRAGMA integrity_check"), "ok");
  const int64_t cookie = after.Int("PRAGMA schema_version");
  const std::string rows = after.Dump();

  // Opened again: nothing to migrate, nothing changes.
  {
    auto again = Store::Open(path);
    ASSERT_TRUE(again) << again.error();
  }
  Raw twice(path);
  EXPECT_EQ(twice.Int("PRAGMA schema_version"), cookie) << "the second open changed the schema";
  EXPECT_EQ(twice.Dump(), rows);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(OlderReleases, StoreMigrationTest, ::testing::Range(1, kSchemaVersion),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return "FromVersion" + std::to_string(info.param);
                         });

TEST(StoreMigrationFixturesTest, ThereIsOneForEveryOlderVersion) {
  for (int v = 1; v < kSchemaVersion; ++v)
    EXPECT_TRUE(fs::exists(fs::path(DESKBOX_STATE_FIXTURES) / ("state-v" + std::to_string(v) + ".db")))
        << "no fixture of schema version " << v << " (tests/api_unit/data/README.md says how to make one)";
}

TEST(StoreLimitsTest, ASandboxsLimitsAreKeptAndDefaultsStayEmpty) {
  auto dir = TempDir("limits");
  std::string path = (dir / kStateDatabase).string();
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store) << store.error();
    SandboxRecord a, b;
    a.id = "sb-00000000000000a1";
    a.cpu_weight = 10;
    a.cpu_max_millis = 500;
    a.exec_pids_max = 256;
    a.exec_memory_mib = 768;
    a.exec_disk_mib = 64;
    b.id = "sb-00000000000000b2";
    b.created_at_ms = 1;
    ASSERT_TRUE((*store)->PutSandbox(a));
    ASSERT_TRUE((*store)->PutSandbox(b));
    SandboxRecord c;
    c.id = "sb-00000000000000c3";
    c.created_at_ms = 2;
    ASSERT_TRUE((*store)->PutSandbox(c));
  }
  {
    Raw raw(path);
    EXPECT_EQ(raw.Text("SELECT limits FROM sandboxes WHERE id = 'sb-00000000000000a1'"), "10/500/256/768/64");
    EXPECT_EQ(raw.Text("SELECT limits = '' FROM sandboxes WHERE id = 'sb-00000000000000b2'"), "1");
    // What the first version of schema 5 wrote, CPU only, reads as CPU only; the second's four
    // numbers as four.
    raw.Exec("UPDATE sandboxes SET limits = '20/700' WHERE id = 'sb-00000000000000b2'");
    raw.Exec("UPDATE sandboxes SET limits = '30/800/128/256' WHERE id = 'sb-00000000000000c3'");
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store) << store.error();
  auto loaded = (*store)->LoadSandboxes();
  ASSERT_TRUE(loaded) << loaded.error().message;
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_EQ(loaded->at(0).cpu_weight, 10u);
  EXPECT_EQ(loaded->at(0).cpu_max_millis, 500u);
  EXPECT_EQ(loaded->at(0).exec_pids_max, 256u);
  EXPECT_EQ(loaded->at(0).exec_memory_mib, 768u);
  EXPECT_EQ(loaded->at(0).exec_disk_mib, 64u);
  EXPECT_EQ(loaded->at(1).cpu_weight, 20u);
  EXPECT_EQ(loaded->at(1).cpu_max_millis, 700u);
  EXPECT_EQ(loaded->at(1).exec_pids_max, 0u);
  EXPECT_EQ(loaded->at(1).exec_memory_mib, 0u);
  EXPECT_EQ(loaded->at(2).exec_pids_max, 128u);
  EXPECT_EQ(loaded->at(2).exec_memory_mib, 256u);
  EXPECT_EQ(loaded->at(2).exec_disk_mib, 0u);
  fs::remove_all(dir);
}

// ---- Backup ----

TokenRecord Token(int i) {
  TokenRecord t;
  t.id = fmt::format("tok_{:016d}", i);
  t.sandbox_id = "sb-0000000000000001";
  t.scope = "view";
  t.hash = Sha256(t.id);
  t.created_at_ms = i;
  t.expires_at_ms = i + 1000;
  t.created_by = "key_x";
  return t;
}

TEST(StoreBackupTest, CopiesAConsistentPrefixWhileAnotherConnectionWrites) {
  auto dir = TempDir("backup-live");
  std::string path = (dir / kStateDatabase).string();
  auto store = Store::Open(path);
  ASSERT_TRUE(store) << store.error();
  SandboxRecord sb;
  sb.id = "sb-0000000000000001";
  sb.state = SandboxState::kRunning;
  ASSERT_TRUE((*store)->PutSandbox(sb));

  // Another connection writes one token per transaction, in order, the whole time.
  std::atomic<int> written{0};
  std::atomic<bool> stop{false};
  std::string writer_error;
  std::thread writer([&] {
    auto w = Store::Open(path);
    if (!w) {
      writer_error = w.error();
      return;
    }
    for (int i = 0; !stop; ++i) {
      if (auto r = (*w)->PutToken(Token(i)); !r) {
        writer_error = r.error().message;
        return;
      }
      written = i + 1;
    }
  });
  while (written < 200 && writer_error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::string copy = (dir / "backup.db").string();
  auto result = Store::Backup(path, copy);
  const int after = written;
  while (written < after + 50 && writer_error.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  stop = true;
  writer.join();
  ASSERT_EQ(writer_error, "");
  ASSERT_TRUE(result) << result.error();
  EXPECT_EQ(result->schema_version, kSchemaVersion);
  EXPECT_EQ(result->sandboxes, 1u);
  EXPECT_GE(result->tokens, 200u);
  EXPECT_LE(result->tokens, static_cast<uint64_t>(after));
  EXPECT_EQ(result->bytes, fs::file_size(copy));
  EXPECT_FALSE(fs::exists(copy + ".tmp-" + std::to_string(::getpid())));
  EXPECT_FALSE(fs::exists(copy + "-wal"));

  // The copy: whole, one file, and exactly the first N tokens: a prefix of what was written.
  {
    Raw raw(copy);
    EXPECT_EQ(raw.Text("PRAGMA integrity_check"), "ok");
    EXPECT_EQ(raw.Text("PRAGMA journal_mode"), "delete");
  }
  auto restored = Store::Open(copy);
  ASSERT_TRUE(restored) << restored.error();
  auto tokens = (*restored)->LoadTokens();
  ASSERT_TRUE(tokens);
  ASSERT_EQ(tokens->size(), result->tokens);
  for (size_t i = 0; i < tokens->size(); ++i) ASSERT_EQ(tokens->at(i).id, Token(static_cast<int>(i)).id);
  auto sandboxes = (*restored)->LoadSandboxes();
  ASSERT_TRUE(sandboxes);
  ASSERT_EQ(sandboxes->size(), 1u);
  EXPECT_EQ(sandboxes->at(0).id, sb.id);
  fs::remove_all(dir);
}

TEST(StoreBackupTest, NeverReplacesAFileAndNeverMakesADatabase) {
  auto dir = TempDir("backup-refuses");
  std::string path = (dir / kStateDatabase).string();
  ASSERT_TRUE(Store::Open(path));
  std::string copy = (dir / "backup.db").string();
  std::ofstream(copy) << "keep me";
  auto r = Store::Backup(path, copy);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("exists"), std::string::npos) << r.error();
  std::ifstream in(copy);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep me");

  // No database there: an error, and none is made.
  std::string missing = (dir / "none" / kStateDatabase).string();
  fs::create_directories(dir / "none");
  r = Store::Backup(missing, (dir / "other.db").string());
  EXPECT_FALSE(r);
  EXPECT_FALSE(fs::exists(missing));
  EXPECT_FALSE(fs::exists(dir / "other.db"));

  // Not a deskbox database: refused, nothing left behind.
  std::string foreign = (dir / "foreign.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(foreign.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  r = Store::Backup(foreign, (dir / "other.db").string());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().find("not a deskbox state database"), std::string::npos) << r.error();
  EXPECT_FALSE(fs::exists(dir / "other.db"));
  fs::remove_all(dir);
}

// ---- A full state disk ----

class StoreFullDiskTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { FullDiskVfs::Install(); }
  void SetUp() override {
    dir_ = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    path_ = (dir_ / kStateDatabase).string();
    auto s = Store::Open(path_);
    ASSERT_TRUE(s) << s.error();
    store_ = std::move(*s);
  }
  void TearDown() override {
    FullDiskVfs::Set(FullDiskVfs::Mode::kWorking);
    store_.reset();
    fs::remove_all(dir_);
  }
  fs::path dir_;
  std::string path_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreFullDiskTest, AWriteFailsAsFullChangesNothingAndWorksOnceThereIsRoom) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store_->PutToken(Token(i)));
  SandboxRecord sb;
  sb.id = "sb-0000000000000001";
  sb.state = SandboxState::kRunning;
  ASSERT_TRUE(store_->PutSandbox(sb));

  FullDiskVfs::Set(FullDiskVfs::Mode::kFull);
  auto t = store_->PutToken(Token(20));
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, StoreError::Code::kFull);
  EXPECT_NE(t.error().message.find("full"), std::string::npos) << t.error().message;
  sb.state = SandboxState::kPaused;
  auto s = store_->PutSandbox(sb);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, StoreError::Code::kFull);
  KeyRecord k{"key_1", "ci", Sha256("k"), 1, 0};
  EXPECT_EQ(store_->PutKey(k).error().code, StoreError::Code::kFull);
  // Reads go on, and show what was written before.
  auto tokens = store_->LoadTokens();
  ASSERT_TRUE(tokens) << tokens.error().message;
  EXPECT_EQ(tokens->size(), 20u);
  auto sandboxes = store_->LoadSandboxes();
  ASSERT_TRUE(sandboxes);
  EXPECT_EQ(sandboxes->at(0).state, SandboxState::kRunning);

  // A disk failing otherwise is not "full".
  FullDiskVfs::Set(FullDiskVfs::Mode::kFailing);
  t = store_->PutToken(Token(20));
  ASSERT_FALSE(t);
  EXPECT_EQ(t.error().code, StoreError::Code::kFailed);

  FullDiskVfs::Set(FullDiskVfs::Mode::kWorking);
  ASSERT_TRUE(store_->PutToken(Token(20)));
  ASSERT_TRUE(store_->PutSandbox(sb));
  ASSERT_TRUE(store_->PutKey(k));
  store_.reset();
  Raw raw(path_);
  EXPECT_EQ(raw.Text("PRAGMA integrity_check"), "ok");
  EXPECT_EQ(raw.Int("SELECT count(*) FROM tokens"), 21);
  EXPECT_EQ(raw.Text("SELECT state FROM sandboxes"), "paused");
}

}  // namespace
}  // namespace deskbox::api
