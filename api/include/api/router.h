#pragma once
// Router: the route table, authentication and the scope check, in one place. A route is a typed
// descriptor (method, pattern, who may call it and how the credential may come, handler); the
// router matches a request, authenticates it, checks the token's scope and sandbox, calls the
// handler, and adds the headers every answer carries (request id, no caching).
//
// Threads: the io_context's.
#include <boost/asio/awaitable.hpp>
#include <boost/beast/http/verb.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "api/clock.h"
#include "api/credentials.h"
#include "api/http_server.h"
#include "api/metrics.h"
#include "recorder/event.pb.h"

namespace deskbox::api {

inline constexpr size_t kMaxJsonBody = 1 << 20;  // bytes of a JSON request body

// Who may call a route, and where its credential may come from. API keys may call every route
// that is not open; tokens only routes that list their scope, and only for their own sandbox.
struct Access {
  bool open = false;                // no authentication (healthz)
  std::vector<Scope> token_scopes;  // empty: API keys only
  bool token_in_query = false;      // ?token= accepted (URLs opened by browsers and CDP clients)
  bool token_in_cookie = false;     // the view page's cookie accepted (its WebSocket and modules)

  static Access Open() { return {.open = true}; }
  static Access KeysOnly() { return {}; }
  static Access Tokens(std::vector<Scope> scopes) { return {.token_scopes = std::move(scopes)}; }
  Access InQuery() && {
    token_in_query = true;
    return std::move(*this);
  }
  Access InCookie() && {
    token_in_cookie = true;
    return std::move(*this);
  }
};

struct RouteSpec;

// One request on its way through a handler.
struct Call {
  Exchange& ex;
  const RouteSpec* route = nullptr;
  Principal principal;
  std::string id;      // the {id} path parameter, if any
  std::string target;  // the {target} path parameter (CDP target or browser id), or the {path} rest
  std::string request_id;
  std::string query_token;  // the credential, when it came in the query string
  std::string secret;       // the credential, however it came (header, query or cookie)

  // The caller as the timeline names it.
  recorder::v1::Actor Actor() const;
  // An event about sandbox `sandbox_id` caused by this call (its actor and request id set).
  recorder::v1::Event NewEvent(const std::string& sandbox_id) const;
};
// An event nobody asked for (timeouts, recovery, a QEMU that exited): actor SYSTEM.
recorder::v1::Event SystemEvent(const std::string& sandbox_id);

using Reply = boost::asio::awaitable<HttpResponse>;
using Handler = std::function<Reply(Call&)>;

struct RouteSpec {
  boost::beast::http::verb method;
  std::string pattern;  // "/v1/sandboxes/{id}/exec", also the metrics label
  Access access;
  Handler handler;
  bool trailing_slash = false;  // "/path/" matches too (CDP clients add one)
};

// The path of a request against a pattern: {id} and {target} take one segment, a final {path}
// one or more (joined with '/').
struct RouteMatch {
  std::string id, target;
};
std::optional<RouteMatch> MatchRoute(std::string_view pattern, std::string_view path,
                                     bool trailing_slash);
// The value of cookie `name` in a Cookie header ("" if absent).
std::string CookieValue(std::string_view header, std::string_view name);

class Router {
 public:
  Router(Credentials& credentials, Metrics& metrics, const Clock& clock)
      : credentials_(credentials), metrics_(metrics), clock_(clock) {}
  void Add(RouteSpec route) { routes_.push_back(std::move(route)); }
  const std::vector<RouteSpec>& routes() const { return routes_; }
  Reply Handle(Exchange& ex);

 private:
  // Authenticates `call` and checks its scope: the refusal, if any.
  std::optional<HttpResponse> Admit(Call& call) const;

  Credentials& credentials_;
  Metrics& metrics_;
  const Clock& clock_;
  std::vector<RouteSpec> routes_;
};

// The cookie the view page sets for its WebSocket and modules (Path=/v1/sandboxes/{id}/).
inline constexpr char kViewCookie[] = "deskbox_view";

// Answers.
HttpResponse Error(unsigned status, std::string_view code, std::string message);
HttpResponse Json(unsigned status, const nlohmann::json& body);
HttpResponse NoContent();
HttpResponse FromBodyError(const BodyError& e);
// The request body as JSON ({} when empty), or the 400 / 413 to answer.
boost::asio::awaitable<std::expected<nlohmann::json, HttpResponse>> ReadJson(Call& c);

}  // namespace deskbox::api
