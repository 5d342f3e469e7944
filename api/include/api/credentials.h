#pragma once
// Credentials: API keys and scoped sandbox tokens. Secrets are 32 random bytes in hex behind a
// prefix (dbk_ keys, dbt_ tokens); only their SHA-256 is kept (memory and database), and a
// presented secret is compared against every candidate hash in constant time. One thread.
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "api/store.h"

namespace deskbox::api {

enum class Scope : uint8_t { kView, kControl, kCdp, kReplay };
std::string_view ToString(Scope s);
std::optional<Scope> ParseScope(std::string_view s);

struct Principal {
  enum class Kind { kApiKey, kToken } kind = Kind::kApiKey;
  std::string id;          // key_… or tok_…
  std::string sandbox_id;  // tokens only
  Scope scope = Scope::kView;
  int64_t expires_at_ms = 0;  // tokens only (Unix ms); 0: does not expire
};

std::string NewSecret(std::string_view prefix);  // prefix + 64 hex
std::string NewId(std::string_view prefix);      // prefix + 16 hex
bool ConstantTimeEqual(const Sha256Digest& a, const Sha256Digest& b);

class Credentials {
 public:
  explicit Credentials(Store& store) : store_(store) {}
  std::expected<void, std::string> Load();
  // Makes sure a usable key exists. With `configured` (DESKBOX_API_KEY) that key is the
  // bootstrap key. Without one and with no live key, generates one, writes it to `key_file`
  // (0600) and returns it so the caller prints it once.
  std::expected<std::optional<std::string>, std::string> EnsureBootstrapKey(const std::string& configured,
                                                                            const std::string& key_file,
                                                                            int64_t now_ms);

  // Unknown, revoked or expired → nullopt.
  std::optional<Principal> Authenticate(std::string_view secret, int64_t now_ms) const;

  // A store error leaves the keys and tokens in memory as they were (nothing half done).
  std::expected<std::pair<KeyRecord, std::string>, StoreError> CreateKey(const std::string& name, int64_t now_ms);
  std::vector<KeyRecord> LiveKeys() const;
  // kEnded: the token was revoked before, or expired (revoking it again changes nothing).
  enum class RevokeResult { kRevoked, kEnded, kNotFound, kLastKey };
  std::expected<RevokeResult, StoreError> RevokeKey(const std::string& id, int64_t now_ms);

  std::expected<std::pair<TokenRecord, std::string>, StoreError> CreateToken(const std::string& sandbox_id,
                                                                             Scope scope, int64_t ttl_ms,
                                                                             const std::string& created_by,
                                                                             int64_t now_ms);
  std::vector<TokenRecord> LiveTokens(const std::string& sandbox_id, int64_t now_ms) const;
  std::expected<RevokeResult, StoreError> RevokeToken(const std::string& id, int64_t now_ms);

 private:
  Store& store_;
  std::vector<KeyRecord> keys_;
  std::vector<TokenRecord> tokens_;
};

}  // namespace deskbox::api
