#pragma once
// Store: deskboxd's persistent state in SQLite (WAL): sandboxes, API keys, tokens. Write-through:
// the service keeps everything in memory and writes each change here before answering, so a
// restart (even after kill -9) finds what clients were told. Secrets are stored as SHA-256 only.
// Used from one thread (the io_context's); schema versioned in the schema_version table.
//
// A write that fails changes nothing (each is one SQLite transaction) and says why: kFull when
// the disk holding the database is full (SQLite's SQLITE_FULL, from ENOSPC), so the API can
// answer 507 and the caller keep its memory as it was; the connection works again once there
// is room. Backup() copies a live database consistently from another process (docs/api.md,
// "Backup and restore").
#include <sqlite3.h>

#include <cstdint>
#include <expected>
#include <memory>
#include <string>
#include <vector>

#include "common/sha256.h"
#include "vmhost/sandbox.h"

namespace deskbox::api {

struct SandboxRecord {
  std::string id;
  vmhost::SandboxState state = vmhost::SandboxState::kCreating;  // stored by its name
  std::string template_name;
  uint32_t slot = 0;
  int qemu_pid = 0;
  uint32_t width = 0, height = 0;
  uint32_t display_w = 0, display_h = 0;  // the display its model works in; 0: the screen's
  uint32_t timeout_s = 0;
  std::string on_timeout = "pause";
  int64_t expires_at_ms = 0;  // 0: no countdown running (paused, failed, stopped)
  int64_t created_at_ms = 0, updated_at_ms = 0, stopped_at_ms = 0;
  std::string metadata_json = "{}";
  std::string egress_json;  // "" when none was given
  std::string failure;
  std::string create_path;
  double create_ms = 0;
  std::string owner;  // API key id that created it
  // Handed out before its browser reloaded its pages, and not yet told that it has: a deskboxd
  // started after one that died meanwhile does the reload again (vmhost WaitBrowserFresh).
  bool browser_refreshing = false;
  bool recording = true;  // its screen is recorded (docs/recording.md)
  // Its CPU share and cap (`limits`, docs/limits.md); 0: the default (weight 100; a cap of the
  // template's vCPUs, i.e. none beyond the guest's own).
  uint32_t cpu_weight = 0, cpu_max_millis = 0;
  // The limits of its guest's exec commands; 0: the guest's defaults (1024 tasks, half of RAM,
  // 512 MiB of disk).
  uint32_t exec_pids_max = 0, exec_memory_mib = 0, exec_disk_mib = 0;
};

struct KeyRecord {
  std::string id, name;
  Sha256Digest hash{};
  int64_t created_at_ms = 0;
  int64_t revoked_at_ms = 0;
};

struct TokenRecord {
  std::string id, sandbox_id, scope;
  Sha256Digest hash{};
  int64_t created_at_ms = 0, expires_at_ms = 0, revoked_at_ms = 0;
  std::string created_by;
};

// The database's file name in deskboxd's state directory.
inline constexpr char kStateDatabase[] = "deskbox.db";
// The schema this build writes; Open migrates every older one (1..) to it.
inline constexpr int kSchemaVersion = 5;

struct StoreError {
  enum class Code {
    kFull,    // no room on the disk (or under a size cap) for the write; retry when there is
    kFailed,  // anything else SQLite reports (I/O error, corrupt file, ...)
  };
  Code code = Code::kFailed;
  std::string message;  // "database: saving token: database or disk is full"
};

struct BackupResult {
  int schema_version = 0;
  uint64_t bytes = 0;  // of the copy
  uint64_t sandboxes = 0, keys = 0, tokens = 0;
};

class Store {
 public:
  static std::expected<std::unique_ptr<Store>, std::string> Open(const std::string& path);
  // Copies the database at `db_path` to the new file `to`, consistently while deskboxd writes to
  // it: VACUUM INTO a temporary file next to `to`, which is then checked (integrity_check, a
  // schema version this build reads), fsynced and renamed to `to` (never over an existing file),
  // and its directory fsynced. Does not create, migrate or write the source.
  static std::expected<BackupResult, std::string> Backup(const std::string& db_path, const std::string& to);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  std::expected<void, StoreError> PutSandbox(const SandboxRecord& r);
  std::expected<std::vector<SandboxRecord>, StoreError> LoadSandboxes();
  std::expected<void, StoreError> PutKey(const KeyRecord& r);
  std::expected<std::vector<KeyRecord>, StoreError> LoadKeys();
  std::expected<void, StoreError> PutToken(const TokenRecord& r);
  std::expected<std::vector<TokenRecord>, StoreError> LoadTokens();
  // Whether a token of this id was ever made (expired ones stay on record).
  std::expected<bool, StoreError> TokenExists(const std::string& id);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  std::expected<void, std::string> Exec(const char* sql);
  StoreError Error(const char* what) const;
  sqlite3* db_;
};

}  // namespace deskbox::api
