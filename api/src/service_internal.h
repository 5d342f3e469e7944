#pragma once
// What the translation units of ApiService share: a call's context, the route table's entries
// and the error / JSON response helpers.
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
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

// A live connection (viewer, CDP session) made with a scoped token ends when the token expires,
// as it does when the token is revoked: `close(token_id)` is called at the expiry unless the
// connection ended first (the timer Start returns was destroyed). Nothing happens for an API key.
class TokenExpiryWatch {
 public:
  explicit TokenExpiryWatch(const Principal& p) {
    if (p.kind != Principal::Kind::kToken || p.expires_at_ms <= 0) return;
    int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch()).count();
    token_id_ = p.id;
    ends_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max<int64_t>(0, p.expires_at_ms - now_ms));
  }
  // Starts watching on `executor`; the returned timer must live as long as the connection.
  std::unique_ptr<boost::asio::steady_timer> Start(boost::asio::any_io_executor executor,
                                                   std::function<void(const std::string&)> close) const {
    auto timer = std::make_unique<boost::asio::steady_timer>(executor);
    if (!ends_) return timer;
    timer->expires_at(*ends_);
    timer->async_wait([close = std::move(close), id = token_id_](boost::system::error_code ec) {
      if (!ec) close(id);
    });
    return timer;
  }

 private:
  std::string token_id_;
  std::optional<std::chrono::steady_clock::time_point> ends_;
};

// The "display" member of a request body ("WxH" or {"width", "height"}); failures go to `in`.
// Absent or null: nullopt.
std::optional<std::pair<uint32_t, uint32_t>> ReadDisplayMember(ObjectReader& in);

// The cookie the view page sets for its WebSocket and modules (Path=/v1/sandboxes/{id}/).
inline constexpr char kViewCookie[] = "deskbox_view";
// How long a call that reaches a page (CDP, screenshots, actions) waits for a sandbox restored
// for its create to reload its pages (vmhost WaitBrowserFresh): seconds under emulation, with
// room for a loaded host.
inline constexpr std::chrono::milliseconds kBrowserFreshTimeout{120000};

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
