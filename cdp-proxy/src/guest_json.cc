#include "cdp_proxy/guest_json.h"

#include <fmt/format.h>

namespace deskbox::cdp_proxy {

using nlohmann::json;

namespace {

std::unexpected<Error> BadJson(std::string message) {
  return std::unexpected(Error{ErrorCode::kBadJson, std::move(message)});
}

// True when `text` nests objects/arrays at most `limit` deep (strings are skipped).
bool DepthAtMost(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > limit) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

std::expected<json, Error> Parse(std::string_view body) {
  if (body.size() > kMaxGuestJson)
    return BadJson(fmt::format("answer over {} bytes", kMaxGuestJson));
  // A well-formed answer is at most two levels deep; refuse anything much deeper unparsed.
  if (!DepthAtMost(body, 4)) return BadJson("answer nests too deep");
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return BadJson("answer is not JSON");
  return j;
}

// A string field of the guest's object, if it is one and not too long.
std::string Str(const json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return {};
  const auto& s = it->get_ref<const std::string&>();
  return s.size() > kMaxField ? s.substr(0, kMaxField) : s;
}

// The last path segment of a ws URL such as ws://10.88.0.2:9222/devtools/browser/<id>.
std::string LastSegment(const std::string& url) {
  auto slash = url.rfind('/');
  return slash == std::string::npos ? "" : url.substr(slash + 1);
}

std::expected<json, Error> OneTarget(const json& t, const PublicUrls& urls) {
  if (!t.is_object()) return BadJson("a target is not an object");
  std::string id = Str(t, "id");
  if (!IsValidTargetId(id)) return BadJson("a target id is not valid");
  std::string type = Str(t, "type");
  if (type.empty() || type.size() > 32 || type.find_first_not_of("abcdefghijklmnopqrstuvwxyz_") != std::string::npos)
    return BadJson("a target type is not valid");
  json out = {{"id", id},
              {"type", type},
              {"title", Str(t, "title")},
              {"url", Str(t, "url")},
              {"description", Str(t, "description")}};
  if (std::string fav = Str(t, "faviconUrl"); !fav.empty()) out["faviconUrl"] = fav;
  if (std::string parent = Str(t, "parentId"); IsValidTargetId(parent)) out["parentId"] = parent;
  // Only targets one can attach to get a socket URL (Chromium omits it for attached ones too).
  if (t.contains("webSocketDebuggerUrl")) {
    std::string kind = type == "page" || type == "iframe" ? "page" : type == "browser" ? "browser" : "page";
    out["webSocketDebuggerUrl"] = fmt::format("{}/devtools/{}/{}{}", urls.ws_base, kind, id, urls.query);
    out["devtoolsFrontendUrl"] = fmt::format("devtools://devtools/bundled/inspector.html?ws={}/devtools/{}/{}{}",
                                             urls.host_path, kind, id,
                                             urls.query.empty() ? "" : "&" + urls.query.substr(1));
  }
  return out;
}

}  // namespace

bool IsValidTargetId(std::string_view id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  return true;
}

bool IsValidBrowserId(std::string_view id) {
  if (id.size() != 36) return false;
  for (size_t i = 0; i < id.size(); ++i) {
    char c = id[i];
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? c != '-' : !std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::expected<VersionInfo, Error> SanitizeVersion(std::string_view guest_body,
                                                  const PublicUrls& urls) {
  auto j = Parse(guest_body);
  if (!j) return std::unexpected(std::move(j.error()));
  if (!j->is_object()) return BadJson("/json/version is not an object");
  std::string ws = Str(*j, "webSocketDebuggerUrl");
  std::string id = LastSegment(ws);
  if (!IsValidBrowserId(id)) return BadJson("/json/version has no valid browser id");
  VersionInfo v;
  v.browser_id = id;
  v.body = json::object();
  for (const char* k : {"Browser", "Protocol-Version", "User-Agent", "V8-Version", "WebKit-Version"})
    v.body[k] = Str(*j, k);
  v.body["webSocketDebuggerUrl"] = fmt::format("{}/devtools/browser/{}{}", urls.ws_base, id, urls.query);
  return v;
}

std::expected<json, Error> SanitizeTargets(std::string_view guest_body, const PublicUrls& urls) {
  auto j = Parse(guest_body);
  if (!j) return std::unexpected(std::move(j.error()));
  if (!j->is_array()) return BadJson("/json/list is not an array");
  if (j->size() > kMaxTargets) return BadJson(fmt::format("more than {} targets", kMaxTargets));
  json out = json::array();
  for (const auto& t : *j) {
    auto one = OneTarget(t, urls);
    if (one) out.push_back(std::move(*one));  // a bad entry is dropped, not passed on
  }
  return out;
}

std::expected<json, Error> SanitizeTarget(std::string_view guest_body, const PublicUrls& urls) {
  auto j = Parse(guest_body);
  if (!j) return std::unexpected(std::move(j.error()));
  return OneTarget(*j, urls);
}

CdpMessageInfo InspectClientMessage(std::string_view message) {
  CdpMessageInfo info;
  constexpr size_t kParseLimit = 256 * 1024;
  if (message.size() <= kParseLimit) {
    json j = DepthAtMost(message, 64) ? json::parse(message.begin(), message.end(), nullptr, false) : json();
    if (j.is_object()) {
      info.method = Str(j, "method");
      info.session_id = Str(j, "sessionId");
      if (info.method.size() > 128) info.method = info.method.substr(0, 128);
      if (info.session_id.size() > 64) info.session_id.clear();
      auto params = j.find("params");
      if (info.method == "Target.createBrowserContext" && params != j.end() && params->is_object() &&
          (params->contains("proxyServer") || params->contains("proxyBypassList"))) {
        info.notable = true;
        info.note = "browser context with its own proxy: its traffic still leaves through the sandbox's egress policy";
      }
    } else {
      info.method = "(not JSON)";
    }
  } else {
    // Large messages (file uploads, scripts): look for the method near the start only.
    std::string_view head = message.substr(0, 4096);
    auto p = head.find("\"method\"");
    if (p != std::string_view::npos) {
      auto q1 = head.find('"', head.find(':', p) + 1);
      auto q2 = q1 == std::string_view::npos ? q1 : head.find('"', q1 + 1);
      if (q2 != std::string_view::npos && q2 - q1 <= 128) info.method = std::string(head.substr(q1 + 1, q2 - q1 - 1));
    }
    if (info.method.empty()) info.method = "(large message)";
  }
  // (Playwright sets the download behaviour on every connection: not worth flagging.)
  for (const char* m : {"Security.setIgnoreCertificateErrors",
                        "Target.exposeDevToolsProtocol", "Browser.grantPermissions"}) {
    if (info.method == m) {
      info.notable = true;
      info.note = "flagged method";
    }
  }
  return info;
}

}  // namespace deskbox::cdp_proxy
