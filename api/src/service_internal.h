#pragma once
// What the translation units of ApiService share: a call's context, the route table's entries
// and the error / JSON response helpers.
#include <string>
#include <string_view>
#include <vector>

#include "api/json_input.h"
#include "api/service.h"

namespace deskbox::api {

struct ApiService::Call {
  Exchange& ex;
  const Route* route = nullptr;
  Principal principal;
  std::string id;      // the {id} path parameter, if any
  std::string target;  // the {target} path parameter (CDP target or browser id), or the {path} rest
  std::string request_id;
  std::string query_token;  // the credential, when it came in the query string
  std::string secret;       // the credential, however it came (header, query or cookie)
};

struct ApiService::Route {
  boost::beast::http::verb method;
  std::string pattern;        // "/v1/sandboxes/{id}/exec", also the metrics label
  std::vector<Scope> scopes;  // token scopes allowed; API keys may do everything
  bool token_in_query = false;
  bool open = false;  // no authentication (healthz)
  Reply (ApiService::*handler)(Call&) = nullptr;
  bool trailing_slash = false;
  bool token_in_cookie = false;  // the view page's WebSocket and modules: kViewCookie also counts
};

// The "display" member of a request body ("WxH" or {"width", "height"}); failures go to `in`.
// Absent or null: nullopt.
std::optional<std::pair<uint32_t, uint32_t>> ReadDisplayMember(ObjectReader& in);

// The cookie the view page sets for its WebSocket and modules (Path=/v1/sandboxes/{id}/).
inline constexpr char kViewCookie[] = "deskbox_view";

inline HttpResponse Error(unsigned status, std::string_view code, std::string message) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(nlohmann::json{{"error", {{"code", code}, {"message", std::move(message)}}}});
  return r;
}

inline HttpResponse Json(unsigned status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(body);
  return r;
}

}  // namespace deskbox::api
