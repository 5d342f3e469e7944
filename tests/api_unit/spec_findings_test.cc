// Where deskboxd once answered otherwise than api/openapi.yaml, and answers as the spec says now.
// A new difference gets a test here written to the spec, disabled while deskboxd answers
// otherwise, with a comment marked SPEC: giving the request and deskboxd's answer;
// spec_codes_test.cc lists those (kSpecFindings).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "guest_services_fixture.h"
#include "openapi_spec.h"

namespace deskbox::api {
namespace {

const std::string kNoSandbox = "sb-00000000000000ff";

class SpecFindingsTest : public GuestServicesTest {
 protected:
  SpecFindingsTest() : GuestServicesTest([](DaemonConfig& c) { c.novnc_dir = NoVncDir(); }) {}
  // Where the service looks for noVNC: nothing there unless a test puts it there.
  static std::string NoVncDir() {
    return (std::filesystem::temp_directory_path() /
            ("deskbox-novnc-absent-" + std::to_string(::getpid())))
        .string();
  }
  std::set<unsigned> Documented(const std::string& operation) {
    return testing::FindOperation(operation)->codes;
  }
};

// GET /v1/sandboxes/{id}/view/novnc/core/rfb.js with no noVNC in --novnc-dir: 500 `internal`
// (the spec's Error enum; it was once `internal_error`).
TEST_F(SpecFindingsTest, AssetsWithoutNoVncAre500Internal) {
  std::string id = Create();
  auto r = h_.Call(verb::get, "/v1/sandboxes/" + id + "/view/novnc/core/rfb.js");
  EXPECT_EQ(r.status, 500u) << r.body;
  EXPECT_EQ(Code(r), "internal");
}

// The modules of a sandbox that does not exist: 404 `not_found`, as the spec says (the route
// once served them without looking the sandbox up).
TEST_F(SpecFindingsTest, AssetsOfASandboxThatDoesNotExistAre404) {
  std::filesystem::create_directories(NoVncDir() + "/core");
  std::ofstream(NoVncDir() + "/core/rfb.js") << "export default class RFB {}\n";
  auto r = h_.Call(verb::get, "/v1/sandboxes/" + kNoSandbox + "/view/novnc/core/rfb.js");
  std::filesystem::remove_all(NoVncDir());
  EXPECT_EQ(r.status, 404u) << r.body.substr(0, 200);
  EXPECT_EQ(Code(r), "not_found");
}

// Revoking a token twice: "Revoking a token that is already revoked or expired is not an error
// (204); an id that never existed is 404" (it was once 404 "no active token").
TEST_F(SpecFindingsTest, RevokingATokenAlreadyRevokedOrExpiredIs204) {
  std::string id = Create();
  auto made = Body(h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "view"})"));
  std::string token_id = made.value("id", "");
  ASSERT_EQ(h_.Call(verb::delete_, "/v1/tokens/" + token_id).status, 204u);
  auto r = h_.Call(verb::delete_, "/v1/tokens/" + token_id);
  EXPECT_EQ(r.status, 204u) << r.body;
  auto brief = Body(h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "view", "ttl_s": 1})"));
  h_.clock().Advance(std::chrono::seconds(2));
  r = h_.Call(verb::delete_, "/v1/tokens/" + brief.value("id", ""));
  EXPECT_EQ(r.status, 204u) << r.body;
  r = h_.Call(verb::delete_, "/v1/tokens/tok_0123456789abcdef");
  EXPECT_EQ(r.status, 404u) << r.body;
  EXPECT_EQ(Code(r), "not_found");
}

// A token for a stopped sandbox: 409 `invalid_state`, documented (it once was not).
TEST_F(SpecFindingsTest, ATokenForAStoppedSandboxIs409) {
  std::string id = Create();
  ASSERT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
  auto r = h_.Call(verb::post, "/v1/sandboxes/" + id + "/tokens", R"({"scope": "view"})");
  EXPECT_EQ(r.status, 409u) << r.body;
  EXPECT_EQ(Code(r), "invalid_state");
  EXPECT_TRUE(Documented("createToken").count(409));
}

// A query string that does not parse (a bad %-escape, a parameter given twice) is 400
// `invalid_request` on every operation, before the credential is looked at, and every operation
// documents it (routes without query parameters once did not).
TEST_F(SpecFindingsTest, EveryOperationAnswersAQueryStringThatDoesNotParse400) {
  std::string id = Create();
  for (const auto& op : testing::Spec()) {
    std::string path = op.path;
    for (auto [param, value] : {std::pair{"{id}", id}, {"{path}", std::string("core/rfb.js")},
                                {"{target}", std::string("T1")}, {"{browser}", std::string("B1")},
                                {"{file}", std::string("000000.mp4")}}) {
      if (auto at = path.find(param); at != std::string::npos) path.replace(at, std::string(param).size(), value);
    }
    if (op.id == "revokeToken") path = "/v1/tokens/tok_0123456789abcdef";
    if (op.id == "revokeKey") path = "/v1/keys/key_0123456789abcdef";
    ASSERT_EQ(path.find('{'), std::string::npos) << op.id << " " << path;
    auto method = boost::beast::http::string_to_verb(op.method);
    for (std::string query : {"?a=%zz", "?a=1&a=2"}) {
      // No credential at all: the query string is checked first.
      auto r = h_.Call(method, path + query, "", "");
      EXPECT_EQ(r.status, 400u) << op.id << " " << path << query << ": " << r.body;
      EXPECT_EQ(Code(r), "invalid_request") << op.id;
      EXPECT_TRUE(op.codes.count(400)) << op.id << " does not document 400";
    }
  }
}

}  // namespace
}  // namespace deskbox::api
