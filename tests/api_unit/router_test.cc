#include "api/router.h"

#include <gtest/gtest.h>

#include "api/json_input.h"
#include "route_harness.h"

namespace deskbox::api {
namespace {

using boost::beast::http::verb;

TEST(MatchRouteTest, FillsParametersAndRefusesWhatDoesNotFit) {
  auto m = MatchRoute("/v1/sandboxes/{id}/exec", "/v1/sandboxes/sb-1/exec", false);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->id, "sb-1");
  EXPECT_FALSE(MatchRoute("/v1/sandboxes/{id}/exec", "/v1/sandboxes/sb-1/exec/", false));
  EXPECT_TRUE(MatchRoute("/v1/sandboxes/{id}/cdp", "/v1/sandboxes/sb-1/cdp/", true));
  EXPECT_FALSE(MatchRoute("/v1/sandboxes/{id}/exec", "/v1/sandboxes//exec", false));
  EXPECT_FALSE(MatchRoute("/v1/sandboxes/{id}", "/v1/sandboxes/sb-1/exec", false));
  auto t = MatchRoute("/v1/sandboxes/{id}/cdp/devtools/page/{target}",
                      "/v1/sandboxes/a/cdp/devtools/page/T1", false);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->target, "T1");
  auto rest = MatchRoute("/v1/sandboxes/{id}/view/novnc/{path}",
                         "/v1/sandboxes/a/view/novnc/core/util/x.js", false);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->target, "core/util/x.js");
  EXPECT_FALSE(
      MatchRoute("/v1/sandboxes/{id}/view/novnc/{path}", "/v1/sandboxes/a/view/novnc", false));
}

TEST(CookieValueTest, FindsTheNamedCookieOnly) {
  EXPECT_EQ(CookieValue("a=1; deskbox_view=tok; b=2", "deskbox_view"), "tok");
  EXPECT_EQ(CookieValue("deskbox_viewer=x", "deskbox_view"), "");
  EXPECT_EQ(CookieValue("", "deskbox_view"), "");
}

class RouterTest : public ::testing::Test {
 protected:
  RouterTest() : h_(::testing::UnitTest::GetInstance()->current_test_info()->name()) {}
  void SetUp() override {
    auto echo = [this](Call& c) -> Reply {
      ++calls_;
      co_return Json(200, {{"id", c.id}, {"principal", c.principal.id}});
    };
    h_.router().Add(
        {.method = verb::get, .pattern = "/healthz", .access = Access::Open(), .handler = echo});
    h_.router().Add({.method = verb::post,
                     .pattern = "/v1/things",
                     .access = Access::KeysOnly(),
                     .handler = echo});
    h_.router().Add({.method = verb::get,
                     .pattern = "/v1/things",
                     .access = Access::KeysOnly(),
                     .handler = echo});
    h_.router().Add({.method = verb::get,
                     .pattern = "/v1/sandboxes/{id}/screen",
                     .access = Access::Tokens({Scope::kView, Scope::kControl}),
                     .handler = echo});
    h_.router().Add({.method = verb::get,
                     .pattern = "/v1/sandboxes/{id}/page",
                     .access = Access::Tokens({Scope::kView}).InQuery(),
                     .handler = echo});
    h_.router().Add({.method = verb::get,
                     .pattern = "/v1/sandboxes/{id}/socket",
                     .access = Access::Tokens({Scope::kView}).InCookie(),
                     .handler = echo});
    key_ = h_.NewKey();
    h_.Start();
  }
  std::string Code(const ClientResponse& r) {
    auto j = ParseJson(r.body);
    return j && j->contains("error") ? (*j)["error"].value("code", "") : "";
  }

  RouteHarness h_;
  std::string key_;
  int calls_ = 0;
};

TEST_F(RouterTest, OpenRoutesNeedNoCredential) {
  auto r = h_.Send(verb::get, "/healthz");
  EXPECT_EQ(r.status, 200u);
  EXPECT_EQ(calls_, 1);
}

TEST_F(RouterTest, EveryAnswerCarriesARequestIdAndNoCaching) {
  for (auto r : {h_.Send(verb::get, "/healthz"), h_.Send(verb::get, "/nowhere"),
                 h_.Send(verb::get, "/v1/things")}) {
    EXPECT_TRUE(r.header("X-Request-Id").starts_with("req_")) << r.body;
    EXPECT_EQ(r.header("Cache-Control"), "no-store");
    EXPECT_EQ(r.header("X-Content-Type-Options"), "nosniff");
  }
}

TEST_F(RouterTest, UnknownPathsAre404AndOtherMethods405WithAllow) {
  auto r = h_.Send(verb::get, "/v1/nothing", key_);
  EXPECT_EQ(r.status, 404u);
  EXPECT_EQ(Code(r), "not_found");
  r = h_.Send(verb::delete_, "/v1/things", key_);
  EXPECT_EQ(r.status, 405u);
  EXPECT_EQ(Code(r), "method_not_allowed");
  EXPECT_EQ(r.header("Allow"), "POST, GET");
  EXPECT_EQ(calls_, 0);
}

TEST_F(RouterTest, MissingBadOrUnknownCredentialsAre401) {
  EXPECT_EQ(h_.Send(verb::get, "/v1/things").status, 401u);
  EXPECT_EQ(h_.Send(verb::get, "/v1/things", "", {{"Authorization", "Basic abc"}}).status, 401u);
  EXPECT_EQ(h_.Send(verb::get, "/v1/things", "dbk_" + std::string(64, '0')).status, 401u);
  auto r = h_.Send(verb::get, "/v1/things?token=" + key_);
  EXPECT_EQ(r.status, 401u) << "no credentials in the query where the route does not take them";
  EXPECT_NE(r.body.find("query string"), std::string::npos) << r.body;
  EXPECT_EQ(calls_, 0);
  EXPECT_EQ(h_.Send(verb::get, "/v1/things", key_).status, 200u);
}

TEST_F(RouterTest, TokensUseOnlyTheirScopeAndTheirSandbox) {
  std::string view = h_.NewToken("sb-a", Scope::kView);
  std::string cdp = h_.NewToken("sb-a", Scope::kCdp);
  EXPECT_EQ(h_.Send(verb::get, "/v1/sandboxes/sb-a/screen", view).status, 200u);
  auto r = h_.Send(verb::get, "/v1/sandboxes/sb-a/screen", cdp);
  EXPECT_EQ(r.status, 403u);
  EXPECT_EQ(Code(r), "forbidden");
  r = h_.Send(verb::get, "/v1/sandboxes/sb-b/screen", view);
  EXPECT_EQ(r.status, 403u);
  EXPECT_NE(r.body.find("another sandbox"), std::string::npos);
  EXPECT_EQ(h_.Send(verb::get, "/v1/things", view).status, 403u) << "a token is never an API key";
  EXPECT_EQ(h_.Send(verb::get, "/v1/sandboxes/sb-b/screen", key_).status, 200u)
      << "keys reach every sandbox";
}

TEST_F(RouterTest, QueryAndCookieCredentialsOnlyWhereTheRouteTakesThem) {
  std::string view = h_.NewToken("sb-a", Scope::kView);
  EXPECT_EQ(h_.Send(verb::get, "/v1/sandboxes/sb-a/page?token=" + view).status, 200u);
  EXPECT_EQ(h_.Send(verb::get, "/v1/sandboxes/sb-a/socket?token=" + view).status, 401u);
  EXPECT_EQ(
      h_.Send(verb::get, "/v1/sandboxes/sb-a/socket", "", {{"Cookie", "deskbox_view=" + view}})
          .status,
      200u);
  EXPECT_EQ(h_.Send(verb::get, "/v1/sandboxes/sb-a/page", "", {{"Cookie", "deskbox_view=" + view}})
                .status,
            401u);
}

TEST_F(RouterTest, TokensExpireOnTheClock) {
  std::string view = h_.NewToken("sb-a", Scope::kView, 60000);
  EXPECT_EQ(h_.Send(verb::get, "/v1/sandboxes/sb-a/screen", view).status, 200u);
  h_.OnServer([this] {
    h_.clock().Advance(std::chrono::seconds(61));
    return 0;
  });
  auto r = h_.Send(verb::get, "/v1/sandboxes/sb-a/screen", view);
  EXPECT_EQ(r.status, 401u);
  EXPECT_EQ(Code(r), "unauthorized");
}

TEST_F(RouterTest, BadQueryStringsAre400BeforeAuthentication) {
  auto r = h_.Send(verb::get, "/v1/things?a=%zz");
  EXPECT_EQ(r.status, 400u);
  EXPECT_EQ(Code(r), "invalid_request");
  r = h_.Send(verb::get, "/v1/things?a=1&a=2", key_);
  EXPECT_EQ(r.status, 400u);
  EXPECT_NE(r.body.find("given twice"), std::string::npos);
}

}  // namespace
}  // namespace deskbox::api
