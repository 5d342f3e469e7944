#include "api/store.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>

namespace deskbox::api {

namespace {

// 2: sandboxes.display ("WxH" or ""); 3: sandboxes.browser_refreshing; 4: sandboxes.recording.
// An older database is migrated on open.
constexpr int kSchemaVersion = 4;

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS sandboxes (
  id TEXT PRIMARY KEY, state TEXT NOT NULL, template TEXT NOT NULL,
  slot INTEGER NOT NULL, qemu_pid INTEGER NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL,
  timeout_s INTEGER NOT NULL, on_timeout TEXT NOT NULL, expires_at_ms INTEGER NOT NULL,
  created_at_ms INTEGER NOT NULL, updated_at_ms INTEGER NOT NULL, stopped_at_ms INTEGER NOT NULL,
  metadata TEXT NOT NULL, egress TEXT NOT NULL, failure TEXT NOT NULL,
  create_path TEXT NOT NULL, create_ms REAL NOT NULL, owner TEXT NOT NULL,
  display TEXT NOT NULL DEFAULT '', browser_refreshing INTEGER NOT NULL DEFAULT 0,
  recording INTEGER NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS api_keys (
  id TEXT PRIMARY KEY, name TEXT NOT NULL, hash BLOB NOT NULL,
  created_at_ms INTEGER NOT NULL, revoked_at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
  id TEXT PRIMARY KEY, sandbox_id TEXT NOT NULL, scope TEXT NOT NULL, hash BLOB NOT NULL,
  created_at_ms INTEGER NOT NULL, expires_at_ms INTEGER NOT NULL, revoked_at_ms INTEGER NOT NULL,
  created_by TEXT NOT NULL);
)sql";

// One prepared statement, finalized on scope exit.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr); }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  Statement& Text(int i, const std::string& v) {
    sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Int(int i, int64_t v) {
    sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Statement& Real(int i, double v) {
    sqlite3_bind_double(stmt_, i, v);
    return *this;
  }
  Statement& Blob(int i, const Sha256Digest& d) {
    sqlite3_bind_blob(stmt_, i, d.data(), static_cast<int>(d.size()), SQLITE_TRANSIENT);
    return *this;
  }
  int Step() { return sqlite3_step(stmt_); }
  std::string ColText(int i) {
    auto p = sqlite3_column_text(stmt_, i);
    return p ? std::string(reinterpret_cast<const char*>(p), sqlite3_column_bytes(stmt_, i)) : "";
  }
  int64_t ColInt(int i) { return sqlite3_column_int64(stmt_, i); }
  double ColReal(int i) { return sqlite3_column_double(stmt_, i); }
  Sha256Digest ColDigest(int i) {
    Sha256Digest d{};
    if (sqlite3_column_bytes(stmt_, i) == static_cast<int>(d.size()))
      std::memcpy(d.data(), sqlite3_column_blob(stmt_, i), d.size());
    return d;
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

}  // namespace

std::expected<std::unique_ptr<Store>, std::string> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                           nullptr);
  if (rc != SQLITE_OK) {
    std::string m = fmt::format("opening {}: {}", path, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
    sqlite3_close(db);
    return std::unexpected(m);
  }
  std::unique_ptr<Store> store(new Store(db));
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL", "PRAGMA foreign_keys=ON"})
    if (auto r = store->Exec(pragma); !r) return std::unexpected(r.error());
  if (auto r = store->Exec(kSchema); !r) return std::unexpected(r.error());
  Statement q(db, "SELECT version FROM schema_version LIMIT 1");
  if (!q.ok()) return std::unexpected(store->Error("reading schema version"));
  if (q.Step() == SQLITE_ROW) {
    int64_t v = q.ColInt(0);
    // Each step: the column a version added, from the version before it.
    struct Migration {
      int64_t from;
      const char* alter;
    };
    for (const Migration& m : {Migration{1, "ALTER TABLE sandboxes ADD COLUMN display TEXT NOT NULL DEFAULT ''"},
                               Migration{2, "ALTER TABLE sandboxes ADD COLUMN browser_refreshing INTEGER NOT NULL "
                                            "DEFAULT 0"},
                               Migration{3, "ALTER TABLE sandboxes ADD COLUMN recording INTEGER NOT NULL DEFAULT 1"}}) {
      if (v != m.from) continue;
      std::string bump = fmt::format("UPDATE schema_version SET version = {}", m.from + 1);
      for (const char* sql : {"BEGIN", m.alter, bump.c_str(), "COMMIT"})
        if (auto r = store->Exec(sql); !r) {
          (void)store->Exec("ROLLBACK");
          return std::unexpected(fmt::format("{}: migrating to schema version {}: {}", path, m.from + 1, r.error()));
        }
      v = m.from + 1;
    }
    if (v != kSchemaVersion)
      return std::unexpected(fmt::format("{}: schema version {} is not {} (made by another deskboxd version)",
                                         path, v, kSchemaVersion));
  } else {
    Statement ins(db, "INSERT INTO schema_version (version) VALUES (?)");
    ins.Int(1, kSchemaVersion);
    if (ins.Step() != SQLITE_DONE) return std::unexpected(store->Error("writing schema version"));
  }
  return store;
}

Store::~Store() { sqlite3_close(db_); }

std::string Store::Error(const char* what) const { return fmt::format("database: {}: {}", what, sqlite3_errmsg(db_)); }

std::expected<void, std::string> Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = fmt::format("database: {}", err ? err : "error");
    sqlite3_free(err);
    return std::unexpected(m);
  }
  return {};
}

std::expected<void, std::string> Store::PutSandbox(const SandboxRecord& r) {
  Statement s(db_,
              "INSERT OR REPLACE INTO sandboxes (id, state, template, slot, qemu_pid, width, height, timeout_s, "
              "on_timeout, expires_at_ms, created_at_ms, updated_at_ms, stopped_at_ms, metadata, egress, failure, "
              "create_path, create_ms, owner, display, browser_refreshing, recording) "
              "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!s.ok()) return std::unexpected(Error("saving sandbox"));
  s.Text(1, r.id).Text(2, std::string(vmhost::ToString(r.state))).Text(3, r.template_name).Int(4, r.slot).Int(5, r.qemu_pid);
  s.Int(6, r.width).Int(7, r.height).Int(8, r.timeout_s).Text(9, r.on_timeout).Int(10, r.expires_at_ms);
  s.Int(11, r.created_at_ms).Int(12, r.updated_at_ms).Int(13, r.stopped_at_ms).Text(14, r.metadata_json);
  s.Text(15, r.egress_json).Text(16, r.failure).Text(17, r.create_path).Real(18, r.create_ms).Text(19, r.owner);
  s.Text(20, r.display_w && r.display_h ? fmt::format("{}x{}", r.display_w, r.display_h) : std::string());
  s.Int(21, r.browser_refreshing ? 1 : 0);
  s.Int(22, r.recording ? 1 : 0);
  if (s.Step() != SQLITE_DONE) return std::unexpected(Error("saving sandbox"));
  return {};
}

std::expected<std::vector<SandboxRecord>, std::string> Store::LoadSandboxes() {
  Statement s(db_,
              "SELECT id, state, template, slot, qemu_pid, width, height, timeout_s, on_timeout, expires_at_ms, "
              "created_at_ms, updated_at_ms, stopped_at_ms, metadata, egress, failure, create_path, create_ms, owner, "
              "display, browser_refreshing, recording FROM sandboxes ORDER BY created_at_ms");
  if (!s.ok()) return std::unexpected(Error("loading sandboxes"));
  std::vector<SandboxRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    SandboxRecord r;
    r.id = s.ColText(0);
    auto state = vmhost::ParseSandboxState(s.ColText(1));
    if (!state) return std::unexpected(fmt::format("sandbox {} has an unknown state '{}' in the database", r.id, s.ColText(1)));
    r.state = *state;
    r.template_name = s.ColText(2);
    r.slot = static_cast<uint32_t>(s.ColInt(3));
    r.qemu_pid = static_cast<int>(s.ColInt(4));
    r.width = static_cast<uint32_t>(s.ColInt(5));
    r.height = static_cast<uint32_t>(s.ColInt(6));
    r.timeout_s = static_cast<uint32_t>(s.ColInt(7));
    r.on_timeout = s.ColText(8);
    r.expires_at_ms = s.ColInt(9);
    r.created_at_ms = s.ColInt(10);
    r.updated_at_ms = s.ColInt(11);
    r.stopped_at_ms = s.ColInt(12);
    r.metadata_json = s.ColText(13);
    r.egress_json = s.ColText(14);
    r.failure = s.ColText(15);
    r.create_path = s.ColText(16);
    r.create_ms = s.ColReal(17);
    r.owner = s.ColText(18);
    r.browser_refreshing = s.ColInt(20) != 0;
    r.recording = s.ColInt(21) != 0;
    if (unsigned w = 0, h = 0; std::sscanf(s.ColText(19).c_str(), "%ux%u", &w, &h) == 2) {
      r.display_w = w;
      r.display_h = h;
    }
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return std::unexpected(Error("loading sandboxes"));
  return out;
}

std::expected<void, std::string> Store::PutKey(const KeyRecord& r) {
  Statement s(db_, "INSERT OR REPLACE INTO api_keys (id, name, hash, created_at_ms, revoked_at_ms) VALUES (?,?,?,?,?)");
  if (!s.ok()) return std::unexpected(Error("saving key"));
  s.Text(1, r.id).Text(2, r.name).Blob(3, r.hash).Int(4, r.created_at_ms).Int(5, r.revoked_at_ms);
  if (s.Step() != SQLITE_DONE) return std::unexpected(Error("saving key"));
  return {};
}

std::expected<std::vector<KeyRecord>, std::string> Store::LoadKeys() {
  Statement s(db_, "SELECT id, name, hash, created_at_ms, revoked_at_ms FROM api_keys ORDER BY created_at_ms");
  if (!s.ok()) return std::unexpected(Error("loading keys"));
  std::vector<KeyRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW)
    out.push_back({s.ColText(0), s.ColText(1), s.ColDigest(2), s.ColInt(3), s.ColInt(4)});
  if (rc != SQLITE_DONE) return std::unexpected(Error("loading keys"));
  return out;
}

std::expected<void, std::string> Store::PutToken(const TokenRecord& r) {
  Statement s(db_,
              "INSERT OR REPLACE INTO tokens (id, sandbox_id, scope, hash, created_at_ms, expires_at_ms, "
              "revoked_at_ms, created_by) VALUES (?,?,?,?,?,?,?,?)");
  if (!s.ok()) return std::unexpected(Error("saving token"));
  s.Text(1, r.id).Text(2, r.sandbox_id).Text(3, r.scope).Blob(4, r.hash).Int(5, r.created_at_ms);
  s.Int(6, r.expires_at_ms).Int(7, r.revoked_at_ms).Text(8, r.created_by);
  if (s.Step() != SQLITE_DONE) return std::unexpected(Error("saving token"));
  return {};
}

std::expected<std::vector<TokenRecord>, std::string> Store::LoadTokens() {
  Statement s(db_,
              "SELECT id, sandbox_id, scope, hash, created_at_ms, expires_at_ms, revoked_at_ms, created_by "
              "FROM tokens ORDER BY created_at_ms");
  if (!s.ok()) return std::unexpected(Error("loading tokens"));
  std::vector<TokenRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW)
    out.push_back({s.ColText(0), s.ColText(1), s.ColText(2), s.ColDigest(3), s.ColInt(4), s.ColInt(5),
                   s.ColInt(6), s.ColText(7)});
  if (rc != SQLITE_DONE) return std::unexpected(Error("loading tokens"));
  return out;
}

std::expected<bool, std::string> Store::TokenExists(const std::string& id) {
  Statement s(db_, "SELECT 1 FROM tokens WHERE id = ?");
  if (!s.ok()) return std::unexpected(Error("looking up a token"));
  s.Text(1, id);
  int rc = s.Step();
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) return std::unexpected(Error("looking up a token"));
  return false;
}

}  // namespace deskbox::api
