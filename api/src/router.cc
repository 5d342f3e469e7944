#include "api/router.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/beast/core/string.hpp>

#include "api/json_input.h"
#include "common/log.h"

namespace deskbox::api {

namespace {

constexpr char kRouterLog[] = "api";

std::vector<std::string_view> Segments(std::string_view path) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (start < path.size()) {
    if (path[start] == '/') {
      ++start;
      continue;
    }
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    out.push_back(path.substr(start, end - start));
    start = end;
  }
  return out;
}

}  // namespace

std::optional<RouteMatch> MatchRoute(std::string_view pattern, std::string_view path,
                                     bool trailing_slash) {
  auto p = Segments(pattern), s = Segments(path);
  bool rest = !p.empty() && p.back() == "{path}";
  if (rest ? s.size() < p.size() : p.size() != s.size()) return std::nullopt;
  if (!trailing_slash && !path.empty() && path.back() == '/' && path.size() > 1)
    return std::nullopt;
  if (path.find("//") != std::string_view::npos) return std::nullopt;
  RouteMatch m;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == "{id}") {
      m.id = s[i];
    } else if (p[i] == "{target}") {
      m.target = s[i];
    } else if (p[i] == "{path}") {
      for (size_t j = i; j < s.size(); ++j) m.target += (j > i ? "/" : "") + std::string(s[j]);
    } else if (p[i] != s[i]) {
      return std::nullopt;
    }
  }
  return m;
}

std::string CookieValue(std::string_view header, std::string_view name) {
  while (!header.empty()) {
    size_t end = header.find(';');
    std::string_view part = header.substr(0, end);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.size() > name.size() && part.starts_with(name) && part[name.size()] == '=')
      return std::string(part.substr(name.size() + 1));
    if (end == std::string_view::npos) break;
    header.remove_prefix(end + 1);
  }
  return {};
}

recorder::v1::Actor Call::Actor() const {
  recorder::v1::Actor a;
  a.set_kind(principal.kind == Principal::Kind::kApiKey ? recorder::v1::Actor::API_KEY
                                                        : recorder::v1::Actor::TOKEN);
  a.set_id(principal.id);
  a.set_remote(ex.remote());
  return a;
}

recorder::v1::Event Call::NewEvent(const std::string& sandbox_id) const {
  recorder::v1::Event e;
  e.set_sandbox_id(sandbox_id);
  *e.mutable_actor() = Actor();
  e.set_request_id(request_id);
  return e;
}

recorder::v1::Event SystemEvent(const std::string& sandbox_id) {
  recorder::v1::Event e;
  e.set_sandbox_id(sandbox_id);
  e.mutable_actor()->set_kind(recorder::v1::Actor::SYSTEM);
  return e;
}

std::optional<HttpResponse> Router::Admit(Call& call) const {
  const Exchange& ex = call.ex;
  const Access& access = call.route->access;
  if (ex.query_malformed())
    return Error(400, "invalid_request", "the query string has a bad %-escape");
  if (!ex.duplicates().empty())
    return Error(400, "invalid_request",
                 fmt::format("query parameter '{}' is given twice", ex.duplicates()[0]));
  if (access.open) return std::nullopt;
  std::string_view auth = ex.header("Authorization");
  auto q = ex.query().find("token");
  std::string secret;
  if (q != ex.query().end() && !access.token_in_query) {
    return Error(401, "unauthorized",
                 "credentials are not accepted in the query string on this route; send "
                 "'Authorization: Bearer <key or token>'");
  } else if (!auth.empty()) {
    if (auth.size() < 7 || !boost::beast::iequals(auth.substr(0, 7), "Bearer "))
      return Error(401, "unauthorized", "the Authorization header must be 'Bearer <key or token>'");
    secret = std::string(auth.substr(7));
  } else if (q != ex.query().end()) {
    secret = q->second;
    call.query_token = secret;
  } else if (auto cookie =
                 access.token_in_cookie ? CookieValue(ex.header("Cookie"), kViewCookie) : "";
             !cookie.empty()) {
    secret = cookie;
  } else {
    return Error(401, "unauthorized", "missing 'Authorization: Bearer <key or token>'");
  }
  call.secret = secret;
  auto p = credentials_.Authenticate(secret, clock_.NowMs());
  if (!p)
    return Error(401, "unauthorized",
                 "the key or token is not valid (unknown, revoked or expired)");
  call.principal = *p;
  if (call.principal.kind != Principal::Kind::kToken) return std::nullopt;
  const auto& sc = access.token_scopes;
  if (std::find(sc.begin(), sc.end(), call.principal.scope) == sc.end())
    return Error(403, "forbidden",
                 fmt::format("a {} token may not use {} {}", ToString(call.principal.scope),
                             std::string(ex.method_string()), call.route->pattern));
  if (call.principal.sandbox_id != call.id)
    return Error(403, "forbidden", "this token belongs to another sandbox");
  return std::nullopt;
}

Reply Router::Handle(Exchange& ex) {
  auto t0 = clock_.Steady();
  Call call{ex};
  call.request_id = NewId("req_");
  std::string allowed;
  for (const auto& r : routes_) {
    auto m = MatchRoute(r.pattern, ex.path(), r.trailing_slash);
    if (!m) continue;
    if (r.method == ex.method()) {
      call.route = &r;
      call.id = std::move(m->id);
      call.target = std::move(m->target);
      break;
    }
    allowed += (allowed.empty() ? "" : ", ") + std::string(boost::beast::http::to_string(r.method));
  }
  HttpResponse res;
  if (!call.route) {
    res = allowed.empty()
              ? Error(404, "not_found", fmt::format("no route {}", std::string(ex.path())))
              : Error(405, "method_not_allowed",
                      fmt::format("{} is not allowed on this route (allowed: {})",
                                  std::string(ex.method_string()), allowed));
    if (!allowed.empty()) res.headers.emplace_back("Allow", allowed);
  } else if (auto denied = Admit(call)) {
    res = std::move(*denied);
  } else {
    res = co_await call.route->handler(call);
  }
  std::string label = call.route ? call.route->pattern : "unmatched";
  res.headers.emplace_back("X-Request-Id", call.request_id);
  res.headers.emplace_back("Cache-Control", "no-store");
  res.headers.emplace_back("X-Content-Type-Options", "nosniff");
  metrics_.CountRequest(std::string(ex.method_string()), label, res.status);
  double ms = std::chrono::duration<double, std::milli>(clock_.Steady() - t0).count();
  // The path only: query strings may carry tokens, which never reach a log.
  log::Info(kRouterLog, "{} {} {} {} {:.1f} ms {}", call.request_id, std::string(ex.method_string()),
            label, res.status, ms, call.principal.id);
  co_return res;
}

HttpResponse Error(unsigned status, std::string_view code, std::string message) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(nlohmann::json{{"error", {{"code", code}, {"message", std::move(message)}}}});
  return r;
}

HttpResponse Json(unsigned status, const nlohmann::json& body) {
  HttpResponse r;
  r.status = status;
  r.body = Dump(body);
  return r;
}

HttpResponse NoContent() {
  HttpResponse r;
  r.status = 204;
  return r;
}

HttpResponse FromBodyError(const BodyError& e) {
  switch (e.code) {
    case BodyError::Code::kTooLarge:
      return Error(413, "payload_too_large", e.message);
    case BodyError::Code::kTimeout:
      return Error(400, "invalid_request", e.message);
    case BodyError::Code::kMalformed:
      return Error(400, "invalid_request", e.message);
    case BodyError::Code::kIo:
      break;
  }
  return Error(400, "invalid_request", "reading the request body: " + e.message);
}

boost::asio::awaitable<std::expected<nlohmann::json, HttpResponse>> ReadJson(Call& c) {
  auto body = co_await c.ex.ReadBody(kMaxJsonBody);
  if (!body) {
    if (body.error().code == BodyError::Code::kTooLarge)
      co_return std::unexpected(
          Error(413, "payload_too_large",
                fmt::format("JSON bodies are limited to {} bytes", kMaxJsonBody)));
    co_return std::unexpected(FromBodyError(body.error()));
  }
  if (body->empty()) co_return nlohmann::json::object();
  auto j = ParseJson(*body);
  if (!j) co_return std::unexpected(Error(400, "invalid_json", j.error()));
  co_return std::move(*j);
}

}  // namespace deskbox::api
