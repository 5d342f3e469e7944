#pragma once
// Store: deskboxd's persistent state in SQLite (WAL): sandboxes, API keys, tokens. Write-through:
// the service keeps everything in memory and writes each change here before answering, so a
// restart (even after kill -9) finds what clients were told. Secrets are stored as SHA-256 only.
// Used from one thread (the io_context's); schema versioned in the schema_version table.
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

class Store {
 public:
  static std::expected<std::unique_ptr<Store>, std::string> Open(const std::string& path);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  std::expected<void, std::string> PutSandbox(const SandboxRecord& r);
  std::expected<std::vector<SandboxRecord>, std::string> LoadSandboxes();
  std::expected<void, std::string> PutKey(const KeyRecord& r);
  std::expected<std::vector<KeyRecord>, std::string> LoadKeys();
  std::expected<void, std::string> PutToken(const TokenRecord& r);
  std::expected<std::vector<TokenRecord>, std::string> LoadTokens();
  // Whether a token of this id was ever made (expired ones stay on record).
  std::expected<bool, std::string> TokenExists(const std::string& id);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  std::expected<void, std::string> Exec(const char* sql);
  std::string Error(const char* what) const;
  sqlite3* db_;
};

}  // namespace deskbox::api
