#include "api/credentials.h"

#include <openssl/crypto.h>
#include <sys/stat.h>

#include "common/files.h"

namespace deskbox::api {

std::string_view ToString(Scope s) {
  switch (s) {
    case Scope::kView: return "view";
    case Scope::kControl: return "control";
    case Scope::kCdp: return "cdp";
    case Scope::kReplay: return "replay";
  }
  return "?";
}

std::optional<Scope> ParseScope(std::string_view s) {
  if (s == "view") return Scope::kView;
  if (s == "control") return Scope::kControl;
  if (s == "cdp") return Scope::kCdp;
  if (s == "replay") return Scope::kReplay;
  return std::nullopt;
}

std::string NewSecret(std::string_view prefix) {
  uint8_t b[32];
  RandomBytes(b);
  return std::string(prefix) + ToHex(b);
}

std::string NewId(std::string_view prefix) {
  uint8_t b[8];
  RandomBytes(b);
  return std::string(prefix) + ToHex(b);
}

bool ConstantTimeEqual(const Sha256Digest& a, const Sha256Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::expected<void, std::string> Credentials::Load() {
  auto k = store_.LoadKeys();
  if (!k) return std::unexpected(k.error().message);
  auto t = store_.LoadTokens();
  if (!t) return std::unexpected(t.error().message);
  keys_ = std::move(*k);
  tokens_ = std::move(*t);
  return {};
}

std::expected<std::optional<std::string>, std::string> Credentials::EnsureBootstrapKey(const std::string& configured,
                                                                                       const std::string& key_file,
                                                                                       int64_t now_ms) {
  // The bootstrap key is the one named "bootstrap" (ids are random like every other key's).
  constexpr char kBootstrapName[] = "bootstrap";
  if (!configured.empty()) {
    Sha256Digest h = Sha256(configured);
    for (auto& k : keys_) {
      if (k.name != kBootstrapName) continue;
      // The same key stays as it is (also when it was revoked through the API: rotation must
      // not be undone by a restart); a new one replaces it.
      if (ConstantTimeEqual(k.hash, h)) return std::optional<std::string>();
      KeyRecord updated = k;
      updated.hash = h;
      updated.revoked_at_ms = 0;
      updated.created_at_ms = now_ms;
      if (auto r = store_.PutKey(updated); !r) return std::unexpected(r.error().message);
      k = updated;
      return std::optional<std::string>();
    }
    KeyRecord k{NewId("key_"), kBootstrapName, h, now_ms, 0};
    if (auto r = store_.PutKey(k); !r) return std::unexpected(r.error().message);
    keys_.push_back(k);
    return std::optional<std::string>();
  }
  if (!LiveKeys().empty()) return std::optional<std::string>();
  std::string secret = NewSecret("dbk_");
  if (auto w = WriteFileAtomic(key_file, secret + "\n", 0600); !w)
    return std::unexpected("writing " + key_file + ": " + ErrnoString(w.error()));
  ::chmod(key_file.c_str(), 0600);
  KeyRecord rec{NewId("key_"), kBootstrapName, Sha256(secret), now_ms, 0};
  if (auto r = store_.PutKey(rec); !r) return std::unexpected(r.error().message);
  keys_.push_back(rec);
  return std::optional<std::string>(secret);
}

std::optional<Principal> Credentials::Authenticate(std::string_view secret, int64_t now_ms) const {
  if (secret.size() != 68) return std::nullopt;
  Sha256Digest h = Sha256(secret);
  std::optional<Principal> found;
  // Every candidate is compared, so the time taken does not depend on which one matches.
  if (secret.starts_with("dbk_")) {
    for (const auto& k : keys_) {
      bool eq = ConstantTimeEqual(k.hash, h);
      if (eq && k.revoked_at_ms == 0) found = Principal{Principal::Kind::kApiKey, k.id, "", Scope::kControl};
    }
  } else if (secret.starts_with("dbt_")) {
    for (const auto& t : tokens_) {
      bool eq = ConstantTimeEqual(t.hash, h);
      if (eq && t.revoked_at_ms == 0 && t.expires_at_ms > now_ms) {
        auto scope = ParseScope(t.scope);
        if (scope) found = Principal{Principal::Kind::kToken, t.id, t.sandbox_id, *scope, t.expires_at_ms};
      }
    }
  }
  return found;
}

std::expected<std::pair<KeyRecord, std::string>, StoreError> Credentials::CreateKey(const std::string& name,
                                                                                    int64_t now_ms) {
  std::string secret = NewSecret("dbk_");
  KeyRecord k{NewId("key_"), name, Sha256(secret), now_ms, 0};
  if (auto r = store_.PutKey(k); !r) return std::unexpected(r.error());
  keys_.push_back(k);
  return std::make_pair(k, secret);
}

std::vector<KeyRecord> Credentials::LiveKeys() const {
  std::vector<KeyRecord> out;
  for (const auto& k : keys_)
    if (k.revoked_at_ms == 0) out.push_back(k);
  return out;
}

std::expected<Credentials::RevokeResult, StoreError> Credentials::RevokeKey(const std::string& id, int64_t now_ms) {
  for (auto& k : keys_) {
    if (k.id != id || k.revoked_at_ms != 0) continue;
    if (LiveKeys().size() <= 1) return RevokeResult::kLastKey;
    KeyRecord updated = k;
    updated.revoked_at_ms = now_ms;
    if (auto r = store_.PutKey(updated); !r) return std::unexpected(r.error());
    k = updated;
    return RevokeResult::kRevoked;
  }
  return RevokeResult::kNotFound;
}

std::expected<std::pair<TokenRecord, std::string>, StoreError> Credentials::CreateToken(
    const std::string& sandbox_id, Scope scope, int64_t ttl_ms, const std::string& created_by, int64_t now_ms) {
  std::string secret = NewSecret("dbt_");
  TokenRecord t{NewId("tok_"), sandbox_id, std::string(ToString(scope)), Sha256(secret), now_ms, now_ms + ttl_ms, 0,
                created_by};
  if (auto r = store_.PutToken(t); !r) return std::unexpected(r.error());
  tokens_.push_back(t);
  // Expired tokens are kept in the database for the record but need not stay in memory.
  std::erase_if(tokens_, [&](const TokenRecord& x) { return x.expires_at_ms + 86400000 < now_ms; });
  return std::make_pair(t, secret);
}

std::vector<TokenRecord> Credentials::LiveTokens(const std::string& sandbox_id, int64_t now_ms) const {
  std::vector<TokenRecord> out;
  for (const auto& t : tokens_)
    if (t.sandbox_id == sandbox_id && t.revoked_at_ms == 0 && t.expires_at_ms > now_ms) out.push_back(t);
  return out;
}

std::expected<Credentials::RevokeResult, StoreError> Credentials::RevokeToken(const std::string& id, int64_t now_ms) {
  for (auto& t : tokens_) {
    if (t.id != id) continue;
    if (t.revoked_at_ms != 0 || t.expires_at_ms <= now_ms) return RevokeResult::kEnded;
    TokenRecord updated = t;
    updated.revoked_at_ms = now_ms;
    if (auto r = store_.PutToken(updated); !r) return std::unexpected(r.error());
    t = updated;
    return RevokeResult::kRevoked;
  }
  // Tokens that expired over a day ago are only on record.
  auto known = store_.TokenExists(id);
  if (!known) return std::unexpected(known.error());
  return *known ? RevokeResult::kEnded : RevokeResult::kNotFound;
}

}  // namespace deskbox::api
