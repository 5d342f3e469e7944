#pragma once
// What the guest's Chromium answers on /json/* is hostile input: it is parsed with a size cap,
// only known fields of the expected types are kept, target ids must look like target ids, and
// every URL that points back at the browser is rebuilt from deskbox's own public URL — never
// from what the guest wrote. What cannot be made safe is refused with kBadJson.
#include <cstddef>
#include <expected>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "cdp_proxy/error.h"

namespace deskbox::cdp_proxy {

inline constexpr size_t kMaxGuestJson = 1 << 20;  // bytes of one /json answer
inline constexpr size_t kMaxTargets = 1000;
inline constexpr size_t kMaxField = 8192;  // bytes of one kept string field (titles, URLs)

// Where clients reach this sandbox's CDP through deskbox, e.g. base "ws://127.0.0.1:8080/v1/
// sandboxes/sb-…/cdp" and query "?token=…" (empty when the caller sent a header).
struct PublicUrls {
  std::string ws_base;    // "ws://host:port/v1/sandboxes/<id>/cdp"
  std::string query;      // "" or "?token=…", appended to WebSocket URLs
  std::string host_path;  // "host:port/v1/sandboxes/<id>/cdp" (for devtoolsFrontendUrl's ws=)
};

bool IsValidTargetId(std::string_view id);   // 1..64 of [A-Za-z0-9-]
bool IsValidBrowserId(std::string_view id);  // a UUID: 36 of [0-9a-f-]

// /json/version → the browser's id (from its webSocketDebuggerUrl) and the sanitized answer
// with webSocketDebuggerUrl pointing at deskbox.
struct VersionInfo {
  std::string browser_id;
  nlohmann::json body;
};
std::expected<VersionInfo, Error> SanitizeVersion(std::string_view guest_body,
                                                  const PublicUrls& urls);

// /json/list (an array) or /json/new (one object) → the same shape, sanitized and rewritten.
std::expected<nlohmann::json, Error> SanitizeTargets(std::string_view guest_body,
                                                     const PublicUrls& urls);
std::expected<nlohmann::json, Error> SanitizeTarget(std::string_view guest_body,
                                                    const PublicUrls& urls);

// The "method" (and "sessionId") of a client→browser CDP message, found without trusting the
// message to be small or well-formed. Empty when there is none.
struct CdpMessageInfo {
  std::string method;
  std::string session_id;
  bool notable = false;
  std::string note;
};
CdpMessageInfo InspectClientMessage(std::string_view message);

}  // namespace deskbox::cdp_proxy
