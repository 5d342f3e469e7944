#include "api/credentials.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "common/files.h"

namespace deskbox::api {
namespace {

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("deskbox-cred-" + std::to_string(::getpid()) + "-" +
                                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    auto s = Store::Open((dir_ / "db").string());
    ASSERT_TRUE(s) << s.error();
    store_ = std::move(*s);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(CredentialsTest, GeneratesABootstrapKeyOnceAndStoresItPrivately) {
  Credentials c(*store_);
  ASSERT_TRUE(c.Load());
  std::string file = (dir_ / "api-key").string();
  auto k = c.EnsureBootstrapKey("", file, 1000);
  ASSERT_TRUE(k && *k);
  EXPECT_TRUE((*k)->starts_with("dbk_"));
  struct stat st;
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(ReadFile(file, 1000).value_or(""), **k + "\n");
  auto p = c.Authenticate(**k, 2000);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kind, Principal::Kind::kApiKey);
  // A second start finds the key in the database and prints nothing.
  Credentials again(*store_);
  ASSERT_TRUE(again.Load());
  auto k2 = again.EnsureBootstrapKey("", file, 3000);
  ASSERT_TRUE(k2);
  EXPECT_FALSE(*k2);
  EXPECT_TRUE(again.Authenticate(**k, 4000));
}

TEST_F(CredentialsTest, ConfiguredKeyReplacesTheBootstrapKey) {
  Credentials c(*store_);
  ASSERT_TRUE(c.Load());
  std::string a = NewSecret("dbk_"), b = NewSecret("dbk_");
  ASSERT_TRUE(c.EnsureBootstrapKey(a, (dir_ / "k").string(), 1));
  EXPECT_TRUE(c.Authenticate(a, 2));
  ASSERT_TRUE(c.EnsureBootstrapKey(b, (dir_ / "k").string(), 3));
  EXPECT_FALSE(c.Authenticate(a, 4));
  EXPECT_TRUE(c.Authenticate(b, 4));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "k"));  // a configured key is never written out
}

TEST_F(CredentialsTest, KeysRevokeButNeverTheLastOne) {
  Credentials c(*store_);
  ASSERT_TRUE(c.Load());
  std::string boot = NewSecret("dbk_");
  ASSERT_TRUE(c.EnsureBootstrapKey(boot, (dir_ / "k").string(), 1));
  auto made = c.CreateKey("ci", 2);
  ASSERT_TRUE(made);
  EXPECT_TRUE(c.Authenticate(made->second, 3));
  EXPECT_EQ(c.RevokeKey(made->first.id, 4), Credentials::RevokeResult::kRevoked);
  EXPECT_FALSE(c.Authenticate(made->second, 5));
  EXPECT_EQ(c.RevokeKey(made->first.id, 6), Credentials::RevokeResult::kNotFound);
  auto boot_id = c.LiveKeys().at(0).id;
  EXPECT_EQ(c.RevokeKey(boot_id, 7), Credentials::RevokeResult::kLastKey);
  // Revocations survive a restart.
  Credentials again(*store_);
  ASSERT_TRUE(again.Load());
  EXPECT_FALSE(again.Authenticate(made->second, 8));
  EXPECT_TRUE(again.Authenticate(boot, 8));
}

TEST_F(CredentialsTest, TokensAreScopedExpiringAndRevocable) {
  Credentials c(*store_);
  ASSERT_TRUE(c.Load());
  auto t = c.CreateToken("sb-0000000000000001", Scope::kView, 10000, "key_x", 1000);
  ASSERT_TRUE(t);
  auto p = c.Authenticate(t->second, 2000);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kind, Principal::Kind::kToken);
  EXPECT_EQ(p->sandbox_id, "sb-0000000000000001");
  EXPECT_EQ(p->scope, Scope::kView);
  EXPECT_FALSE(c.Authenticate(t->second, 11001));  // expired
  EXPECT_EQ(c.LiveTokens("sb-0000000000000001", 2000).size(), 1u);
  EXPECT_EQ(c.RevokeToken(t->first.id, 3000), Credentials::RevokeResult::kRevoked);
  EXPECT_FALSE(c.Authenticate(t->second, 3001));
  EXPECT_TRUE(c.LiveTokens("sb-0000000000000001", 3001).empty());
  // Wrong prefix, wrong length, near misses.
  std::string near = t->second;
  near.back() = near.back() == '0' ? '1' : '0';
  EXPECT_FALSE(c.Authenticate(near, 2000));
  EXPECT_FALSE(c.Authenticate("dbk_", 2000));
  EXPECT_FALSE(c.Authenticate("", 2000));
}

TEST_F(CredentialsTest, RevokingAnEndedTokenChangesNothingAndAnUnknownOneIsNotFound) {
  Credentials c(*store_);
  ASSERT_TRUE(c.Load());
  auto revoked = c.CreateToken("sb-0000000000000001", Scope::kView, 10000, "key_x", 1000);
  auto expired = c.CreateToken("sb-0000000000000001", Scope::kView, 1000, "key_x", 1000);
  auto old = c.CreateToken("sb-0000000000000001", Scope::kView, 1000, "key_x", 1000);
  ASSERT_TRUE(revoked && expired && old);
  ASSERT_EQ(c.RevokeToken(revoked->first.id, 3000), Credentials::RevokeResult::kRevoked);
  EXPECT_EQ(c.RevokeToken(revoked->first.id, 4000), Credentials::RevokeResult::kEnded);
  EXPECT_EQ(c.RevokeToken(expired->first.id, 4000), Credentials::RevokeResult::kEnded);
  // A token that expired over a day ago leaves memory at the next create; it is still on record.
  int64_t later = 1000 + 1000 + 86400000 + 1;
  ASSERT_TRUE(c.CreateToken("sb-0000000000000002", Scope::kView, 1000, "key_x", later));
  EXPECT_EQ(c.RevokeToken(old->first.id, later), Credentials::RevokeResult::kEnded);
  EXPECT_EQ(c.RevokeToken("tok_0123456789abcdef", later), Credentials::RevokeResult::kNotFound);
  Credentials again(*store_);
  ASSERT_TRUE(again.Load());
  EXPECT_FALSE(again.Authenticate(revoked->second, 5000));
}

TEST_F(CredentialsTest, SecretsAreStoredHashedOnly) {
  Credentials c(*store_);
  ASSERT_TRUE(c.Load());
  auto k = c.CreateKey("x", 1);
  auto t = c.CreateToken("sb-0000000000000001", Scope::kCdp, 1000, "key_x", 1);
  ASSERT_TRUE(k && t);
  store_.reset();
  auto db = ReadFile((dir_ / "db").string(), 64 << 20).value_or("");
  auto wal = ReadFile((dir_ / "db-wal").string(), 64 << 20).value_or("");
  for (const auto& secret : {k->second, t->second}) {
    EXPECT_EQ(db.find(secret.substr(4)), std::string::npos);
    EXPECT_EQ(wal.find(secret.substr(4)), std::string::npos);
  }
}

TEST(StoreTest, RefusesAnotherSchemaVersion) {
  auto dir = std::filesystem::temp_directory_path() / ("deskbox-store-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / "db").string();
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s);
    SandboxRecord r;
    r.id = "sb-1";
    r.state = vmhost::SandboxState::kRunning;
    r.metadata_json = R"({"k":"v"})";
    ASSERT_TRUE((*s)->PutSandbox(r));
    auto all = (*s)->LoadSandboxes();
    ASSERT_TRUE(all);
    ASSERT_EQ(all->size(), 1u);
    EXPECT_EQ(all->at(0).metadata_json, R"({"k":"v"})");
  }
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db, "UPDATE schema_version SET version=99", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto s = Store::Open(path);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().find("schema version 99"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(StoreTest, KeepsADeclaredDisplayAndMigratesAVersion1Database) {
  auto dir = std::filesystem::temp_directory_path() / ("deskbox-store-v1-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string path = (dir / "db").string();
  {
    // A database as version 1 made it: no display column.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const char* v1 = R"sql(
      CREATE TABLE schema_version (version INTEGER NOT NULL);
      INSERT INTO schema_version VALUES (1);
      CREATE TABLE sandboxes (
        id TEXT PRIMARY KEY, state TEXT NOT NULL, template TEXT NOT NULL,
        slot INTEGER NOT NULL, qemu_pid INTEGER NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL,
        timeout_s INTEGER NOT NULL, on_timeout TEXT NOT NULL, expires_at_ms INTEGER NOT NULL,
        created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, stopped_at_ms INTEGER NOT NULL,
        metadata TEXT NOT NULL, egress TEXT NOT NULL, failure TEXT NOT NULL,
        create_path TEXT NOT NULL, create_ms REAL NOT NULL, owner TEXT NOT NULL);
      INSERT INTO sandboxes VALUES ('sb-old', 'paused', 't@0', 0, 0, 1280, 800, 60, 'pause', 0, 1, 1, 0,
                                    '{}', '', '', 'cold', 1.5, 'key_x');)sql";
    ASSERT_EQ(sqlite3_exec(db, v1, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
    sqlite3_close(db);
  }
  {
    auto s = Store::Open(path);
    ASSERT_TRUE(s) << s.error();
    auto all = (*s)->LoadSandboxes();
    ASSERT_TRUE(all);
    ASSERT_EQ(all->size(), 1u);
    EXPECT_EQ(all->at(0).id, "sb-old");
    EXPECT_EQ(all->at(0).display_w, 0u);
    EXPECT_FALSE(all->at(0).browser_refreshing);
    SandboxRecord r = all->at(0);
    r.display_w = 1024;
    r.display_h = 640;
    r.browser_refreshing = true;
    ASSERT_TRUE((*s)->PutSandbox(r));
  }
  auto s = Store::Open(path);  // now version 3: opens as it is
  ASSERT_TRUE(s) << s.error();
  auto all = (*s)->LoadSandboxes();
  ASSERT_TRUE(all);
  EXPECT_EQ(all->at(0).display_w, 1024u);
  EXPECT_EQ(all->at(0).display_h, 640u);
  EXPECT_TRUE(all->at(0).browser_refreshing);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deskbox::api
