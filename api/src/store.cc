#include "api/store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace deskbox::api {

namespace {

// kSchemaVersion (store.h) 2: sandboxes.display ("WxH" or ""); 3: sandboxes.browser_refreshing;
// 4: sandboxes.recording; 5: sandboxes.limits ("cpu_weight/cpu_max_millis" or "", since then
// "cpu_weight/cpu_max_millis/exec_pids_max/exec_memory_mib", then ".../exec_disk_mib"; all are read). An older
// database is migrated on open; tests/api_unit/data keeps one database of each older version, as
// its release made it.
static_assert(kSchemaVersion == 5, "add the migration step, and a fixture of the version before");

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
  recording INTEGER NOT NULL DEFAULT 1, limits TEXT NOT NULL DEFAULT '');
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
  if (!q.ok()) return std::unexpected(store->Error("reading schema version").message);
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
                               Migration{3, "ALTER TABLE sandboxes ADD COLUMN recording INTEGER NOT NULL DEFAULT 1"},
                               Migration{4, "ALTER TABLE sandboxes ADD COLUMN limits TEXT NOT NULL DEFAULT ''"}}) {
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
    if (ins.Step() != SQLITE_DONE) return std::unexpected(store->Error("writing schema version").message);
  }
  return store;
}

namespace {

// A connection closed on scope exit.
struct Connection {
  sqlite3* db = nullptr;
  ~Connection() { sqlite3_close(db); }
  std::string Message() const { return db ? sqlite3_errmsg(db) : "out of memory"; }
};

std::expected<int64_t, std::string> QueryInt(sqlite3* db, const char* sql) {
  Statement q(db, sql);
  if (!q.ok() || q.Step() != SQLITE_ROW) return std::unexpected(std::string(sqlite3_errmsg(db)));
  return q.ColInt(0);
}

std::expected<void, std::string> SyncPath(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) return std::unexpected(fmt::format("opening {}: {}", path, std::strerror(errno)));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return std::unexpected(fmt::format("fsync {}: {}", path, std::strerror(err)));
  return {};
}

// The copy at `path`, checked: every page (integrity_check) and a schema this build reads.
std::expected<BackupResult, std::string> VerifyCopy(const std::string& path, int64_t source_version) {
  Connection c;
  if (sqlite3_open_v2(path.c_str(), &c.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
    return std::unexpected(fmt::format("opening the copy: {}", c.Message()));
  // One self-contained file at rest; deskboxd turns WAL on again when it opens it.
  if (sqlite3_exec(c.db, "PRAGMA journal_mode=DELETE", nullptr, nullptr, nullptr) != SQLITE_OK)
    return std::unexpected(fmt::format("the copy: {}", c.Message()));
  Statement check(c.db, "PRAGMA integrity_check");
  if (!check.ok() || check.Step() != SQLITE_ROW)
    return std::unexpected(fmt::format("checking the copy: {}", c.Message()));
  if (std::string verdict = check.ColText(0); verdict != "ok")
    return std::unexpected(fmt::format("the copy does not pass integrity_check: {}", verdict));
  BackupResult r;
  auto version = QueryInt(c.db, "SELECT version FROM schema_version");
  if (!version) return std::unexpected("the copy has no schema version: " + version.error());
  if (*version != source_version)
    return std::unexpected(fmt::format("the copy has schema version {}, the database {}", *version, source_version));
  r.schema_version = static_cast<int>(*version);
  const std::pair<const char*, uint64_t*> tables[] = {
      {"sandboxes", &r.sandboxes}, {"api_keys", &r.keys}, {"tokens", &r.tokens}};
  for (auto [table, n] : tables) {
    auto count = QueryInt(c.db, fmt::format("SELECT count(*) FROM {}", table).c_str());
    if (!count) return std::unexpected(fmt::format("the copy's {}: {}", table, count.error()));
    *n = static_cast<uint64_t>(*count);
  }
  return r;
}

}  // namespace

std::expected<BackupResult, std::string> Store::Backup(const std::string& db_path, const std::string& to) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::symlink_status(to, ec).type() != fs::file_type::not_found)
    return std::unexpected(fmt::format("{} exists; a backup never replaces a file", to));
  Connection src;
  // Read-write without CREATE: WAL readers need the shared-memory index, and a missing database
  // is an error, not a new empty one. Nothing is written to it.
  if (sqlite3_open_v2(db_path.c_str(), &src.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
    return std::unexpected(fmt::format("opening {}: {}", db_path, src.Message()));
  sqlite3_busy_timeout(src.db, 5000);
  auto version = QueryInt(src.db, "SELECT version FROM schema_version");
  if (!version) return std::unexpected(fmt::format("{} is not a deskbox state database: {}", db_path, version.error()));
  if (*version < 1 || *version > kSchemaVersion)
    return std::unexpected(fmt::format("{}: schema version {} is not one this deskboxd reads (1..{})", db_path,
                                       *version, kSchemaVersion));
  const std::string tmp = fmt::format("{}.tmp-{}", to, ::getpid());
  fs::remove(tmp, ec);
  auto fail = [&](std::string m) {
    fs::remove(tmp, ec);
    return std::unexpected(std::move(m));
  };
  // One statement, so one read transaction: a consistent snapshot that, in WAL mode, neither
  // waits for deskboxd's writes nor holds them up.
  {
    Statement vacuum(src.db, "VACUUM INTO ?");
    if (!vacuum.ok()) return fail(fmt::format("copying {}: {}", db_path, src.Message()));
    vacuum.Text(1, tmp);
    if (vacuum.Step() != SQLITE_DONE) return fail(fmt::format("copying {} to {}: {}", db_path, tmp, src.Message()));
  }
  auto result = VerifyCopy(tmp, *version);
  if (!result) return fail(fmt::format("{}: {}", tmp, result.error()));
  result->bytes = fs::file_size(tmp, ec);
  if (auto s = SyncPath(tmp, O_RDONLY); !s) return fail(s.error());
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) != 0)
    return fail(errno == EEXIST ? fmt::format("{} exists; a backup never replaces a file", to)
                                : fmt::format("renaming {} to {}: {}", tmp, to, std::strerror(errno)));
  std::string dir = fs::path(to).parent_path().string();
  if (auto s = SyncPath(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY); !s) return std::unexpected(s.error());
  return result;
}

Store::~Store() { sqlite3_close(db_); }

StoreError Store::Error(const char* what) const {
  // The primary code: SQLITE_FULL is what SQLite makes of ENOSPC (and of a size cap).
  bool full = (sqlite3_extended_errcode(db_) & 0xff) == SQLITE_FULL;
  return {full ? StoreError::Code::kFull : StoreError::Code::kFailed,
          fmt::format("database: {}: {}", what, sqlite3_errmsg(db_))};
}

std::expected<void, std::string> Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = fmt::format("database: {}", err ? err : "error");
    sqlite3_free(err);
    return std::unexpected(m);
  }
  return {};
}

std::expected<void, StoreError> Store::PutSandbox(const SandboxRecord& r) {
  Statement s(db_,
              "INSERT OR REPLACE INTO sandboxes (id, state, template, slot, qemu_pid, width, height, timeout_s, "
              "on_timeout, expires_at_ms, created_at_ms, updated_at_ms, stopped_at_ms, metadata, egress, failure, "
              "create_path, create_ms, owner, display, browser_refreshing, recording, limits) "
              "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  if (!s.ok()) return std::unexpected(Error("saving sandbox"));
  s.Text(1, r.id).Text(2, std::string(vmhost::ToString(r.state))).Text(3, r.template_name).Int(4, r.slot).Int(5, r.qemu_pid);
  s.Int(6, r.width).Int(7, r.height).Int(8, r.timeout_s).Text(9, r.on_timeout).Int(10, r.expires_at_ms);
  s.Int(11, r.created_at_ms).Int(12, r.updated_at_ms).Int(13, r.stopped_at_ms).Text(14, r.metadata_json);
  s.Text(15, r.egress_json).Text(16, r.failure).Text(17, r.create_path).Real(18, r.create_ms).Text(19, r.owner);
  s.Text(20, r.display_w && r.display_h ? fmt::format("{}x{}", r.display_w, r.display_h) : std::string());
  s.Int(21, r.browser_refreshing ? 1 : 0);
  s.Int(22, r.recording ? 1 : 0);
  s.Text(23, r.cpu_weight || r.cpu_max_millis || r.exec_pids_max || r.exec_memory_mib || r.exec_disk_mib
                 ? fmt::format("{}/{}/{}/{}/{}", r.cpu_weight, r.cpu_max_millis, r.exec_pids_max, r.exec_memory_mib,
                               r.exec_disk_mib)
                 : std::string());
  if (s.Step() != SQLITE_DONE) return std::unexpected(Error("saving sandbox"));
  return {};
}

std::expected<std::vector<SandboxRecord>, StoreError> Store::LoadSandboxes() {
  Statement s(db_,
              "SELECT id, state, template, slot, qemu_pid, width, height, timeout_s, on_timeout, expires_at_ms, "
              "created_at_ms, updated_at_ms, stopped_at_ms, metadata, egress, failure, create_path, create_ms, owner, "
              "display, browser_refreshing, recording, limits FROM sandboxes ORDER BY created_at_ms");
  if (!s.ok()) return std::unexpected(Error("loading sandboxes"));
  std::vector<SandboxRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW) {
    SandboxRecord r;
    r.id = s.ColText(0);
    auto state = vmhost::ParseSandboxState(s.ColText(1));
    if (!state)
      return std::unexpected(StoreError{StoreError::Code::kFailed,
                                        fmt::format("sandbox {} has an unknown state '{}' in the database", r.id, s.ColText(1))});
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
    if (unsigned w = 0, m = 0, p = 0, e = 0, d = 0;
        std::sscanf(s.ColText(22).c_str(), "%u/%u/%u/%u/%u", &w, &m, &p, &e, &d) >= 2) {
      r.cpu_weight = w;
      r.cpu_max_millis = m;
      r.exec_pids_max = p;
      r.exec_memory_mib = e;
      r.exec_disk_mib = d;
    }
    if (unsigned w = 0, h = 0; std::sscanf(s.ColText(19).c_str(), "%ux%u", &w, &h) == 2) {
      r.display_w = w;
      r.display_h = h;
    }
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return std::unexpected(Error("loading sandboxes"));
  return out;
}

std::expected<void, StoreError> Store::PutKey(const KeyRecord& r) {
  Statement s(db_, "INSERT OR REPLACE INTO api_keys (id, name, hash, created_at_ms, revoked_at_ms) VALUES (?,?,?,?,?)");
  if (!s.ok()) return std::unexpected(Error("saving key"));
  s.Text(1, r.id).Text(2, r.name).Blob(3, r.hash).Int(4, r.created_at_ms).Int(5, r.revoked_at_ms);
  if (s.Step() != SQLITE_DONE) return std::unexpected(Error("saving key"));
  return {};
}

std::expected<std::vector<KeyRecord>, StoreError> Store::LoadKeys() {
  Statement s(db_, "SELECT id, name, hash, created_at_ms, revoked_at_ms FROM api_keys ORDER BY created_at_ms");
  if (!s.ok()) return std::unexpected(Error("loading keys"));
  std::vector<KeyRecord> out;
  int rc;
  while ((rc = s.Step()) == SQLITE_ROW)
    out.push_back({s.ColText(0), s.ColText(1), s.ColDigest(2), s.ColInt(3), s.ColInt(4)});
  if (rc != SQLITE_DONE) return std::unexpected(Error("loading keys"));
  return out;
}

std::expected<void, StoreError> Store::PutToken(const TokenRecord& r) {
  Statement s(db_,
              "INSERT OR REPLACE INTO tokens (id, sandbox_id, scope, hash, created_at_ms, expires_at_ms, "
              "revoked_at_ms, created_by) VALUES (?,?,?,?,?,?,?,?)");
  if (!s.ok()) return std::unexpected(Error("saving token"));
  s.Text(1, r.id).Text(2, r.sandbox_id).Text(3, r.scope).Blob(4, r.hash).Int(5, r.created_at_ms);
  s.Int(6, r.expires_at_ms).Int(7, r.revoked_at_ms).Text(8, r.created_by);
  if (s.Step() != SQLITE_DONE) return std::unexpected(Error("saving token"));
  return {};
}

std::expected<std::vector<TokenRecord>, StoreError> Store::LoadTokens() {
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

std::expected<bool, StoreError> Store::TokenExists(const std::string& id) {
  Statement s(db_, "SELECT 1 FROM tokens WHERE id = ?");
  if (!s.ok()) return std::unexpected(Error("looking up a token"));
  s.Text(1, id);
  int rc = s.Step();
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) return std::unexpected(Error("looking up a token"));
  return false;
}

}  // namespace deskbox::api
