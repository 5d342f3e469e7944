#include "cdp_proxy/guest_json.h"

#include <gtest/gtest.h>

namespace deskbox::cdp_proxy {
namespace {

const PublicUrls kUrls{"ws://127.0.0.1:8080/v1/sandboxes/sb-1/cdp", "", "127.0.0.1:8080/v1/sandboxes/sb-1/cdp"};
const PublicUrls kQueryUrls{"ws://127.0.0.1:8080/v1/sandboxes/sb-1/cdp", "?token=dbt_x",
                            "127.0.0.1:8080/v1/sandboxes/sb-1/cdp"};

TEST(GuestJsonTest, VersionIsRewrittenToDeskbox) {
  auto v = SanitizeVersion(R"({"Browser":"Chrome/156","Protocol-Version":"1.3","User-Agent":"UA",
      "V8-Version":"15","WebKit-Version":"537","Evil":"x",
      "webSocketDebuggerUrl":"ws://10.88.0.2:9222/devtools/browser/41c9b841-d7e4-4d03-b4f7-6039eb2bedc9"})",
                           kQueryUrls);
  ASSERT_TRUE(v) << v.error().message;
  EXPECT_EQ(v->browser_id, "41c9b841-d7e4-4d03-b4f7-6039eb2bedc9");
  EXPECT_EQ(v->body["webSocketDebuggerUrl"],
            "ws://127.0.0.1:8080/v1/sandboxes/sb-1/cdp/devtools/browser/41c9b841-d7e4-4d03-b4f7-6039eb2bedc9?token=dbt_x");
  EXPECT_EQ(v->body["Browser"], "Chrome/156");
  EXPECT_FALSE(v->body.contains("Evil"));
}

TEST(GuestJsonTest, VersionWithoutAValidBrowserIdIsRefused) {
  EXPECT_FALSE(SanitizeVersion(R"({"webSocketDebuggerUrl":"ws://evil.example:1/devtools/browser/../../x"})", kUrls));
  EXPECT_FALSE(SanitizeVersion(R"({"webSocketDebuggerUrl":5})", kUrls));
  EXPECT_FALSE(SanitizeVersion("[]", kUrls));
  EXPECT_FALSE(SanitizeVersion("not json", kUrls));
  EXPECT_FALSE(SanitizeVersion(std::string(kMaxGuestJson + 1, ' '), kUrls));
  EXPECT_FALSE(SanitizeVersion(std::string(1000, '[') + std::string(1000, ']'), kUrls));
}

// Every refusal of the guest's /json content is kBadJson, with the message deskboxd passes on.
TEST(GuestJsonTest, RefusedContentIsBadJson) {
  struct Case {
    std::expected<nlohmann::json, Error> result;
    std::string message;
  } cases[] = {
      {SanitizeTargets("not json", kUrls), "answer is not JSON"},
      {SanitizeTargets("{}", kUrls), "/json/list is not an array"},
      {SanitizeTargets(std::string(kMaxGuestJson + 1, ' '), kUrls), "answer over 1048576 bytes"},
      {SanitizeTargets(std::string(10, '[') + std::string(10, ']'), kUrls),
       "answer nests too deep"},
      {SanitizeTarget("[]", kUrls), "a target is not an object"},
      {SanitizeTarget(R"({"id":"a/b","type":"page"})", kUrls), "a target id is not valid"},
      {SanitizeTarget(R"({"id":"A","type":"Page!"})", kUrls), "a target type is not valid"},
  };
  for (const auto& c : cases) {
    ASSERT_FALSE(c.result) << c.message;
    EXPECT_EQ(c.result.error().code, ErrorCode::kBadJson) << c.message;
    EXPECT_EQ(c.result.error().message, c.message);
  }
  auto v = SanitizeVersion(R"({"webSocketDebuggerUrl":5})", kUrls);
  ASSERT_FALSE(v);
  EXPECT_EQ(v.error().code, ErrorCode::kBadJson);
  EXPECT_EQ(v.error().message, "/json/version has no valid browser id");
}

TEST(GuestJsonTest, TargetsKeepOnlyValidatedFieldsAndOurUrls) {
  auto t = SanitizeTargets(R"([
    {"id":"F7E04605C95D7A665B33B112ED20DFDF","type":"page","title":"T","url":"about:blank","description":"",
     "webSocketDebuggerUrl":"ws://attacker.example:9/devtools/page/F7E04605C95D7A665B33B112ED20DFDF",
     "devtoolsFrontendUrl":"https://attacker.example/","extra":{"a":1}},
    {"id":"../../etc","type":"page","webSocketDebuggerUrl":"x"},
    {"id":"AAAA","type":"Page!"},
    {"id":"BBBB","type":"service_worker","title":7,"parentId":"F7E04605C95D7A665B33B112ED20DFDF"}])",
                           kQueryUrls);
  ASSERT_TRUE(t) << t.error().message;
  ASSERT_EQ(t->size(), 2u);  // the bad id and the bad type are dropped
  const auto& p = (*t)[0];
  EXPECT_EQ(p["webSocketDebuggerUrl"],
            "ws://127.0.0.1:8080/v1/sandboxes/sb-1/cdp/devtools/page/F7E04605C95D7A665B33B112ED20DFDF?token=dbt_x");
  EXPECT_EQ(p["devtoolsFrontendUrl"],
            "devtools://devtools/bundled/inspector.html?ws=127.0.0.1:8080/v1/sandboxes/sb-1/cdp/devtools/page/"
            "F7E04605C95D7A665B33B112ED20DFDF&token=dbt_x");
  EXPECT_FALSE(p.contains("extra"));
  EXPECT_EQ((*t)[1]["title"], "");  // wrong type → empty, not passed through
  EXPECT_FALSE((*t)[1].contains("webSocketDebuggerUrl"));
  EXPECT_EQ((*t)[1]["parentId"], "F7E04605C95D7A665B33B112ED20DFDF");
  std::string all = t->dump();
  EXPECT_EQ(all.find("attacker"), std::string::npos);
}

TEST(GuestJsonTest, TooManyTargetsAndLongFields) {
  std::string many = "[";
  for (size_t i = 0; i <= kMaxTargets; ++i) many += std::string(i ? "," : "") + R"({"id":"A","type":"page"})";
  many += "]";
  EXPECT_FALSE(SanitizeTargets(many, kUrls));
  std::string long_title(kMaxField + 100, 'x');
  auto t = SanitizeTarget(R"({"id":"A","type":"page","title":")" + long_title + R"("})", kUrls);
  ASSERT_TRUE(t);
  EXPECT_EQ((*t)["title"].get<std::string>().size(), kMaxField);
}

TEST(GuestJsonTest, Ids) {
  EXPECT_TRUE(IsValidTargetId("F7E04605C95D7A665B33B112ED20DFDF"));
  EXPECT_FALSE(IsValidTargetId(""));
  EXPECT_FALSE(IsValidTargetId("a/b"));
  EXPECT_FALSE(IsValidTargetId(std::string(65, 'a')));
  EXPECT_TRUE(IsValidBrowserId("41c9b841-d7e4-4d03-b4f7-6039eb2bedc9"));
  EXPECT_FALSE(IsValidBrowserId("41c9b841-d7e4-4d03-b4f7-6039eb2bedcZ"));
  EXPECT_FALSE(IsValidBrowserId("41c9b841d7e44d03b4f76039eb2bedc9"));
}

TEST(GuestJsonTest, ClientMessagesAreInspectedForMethodOnly) {
  auto i = InspectClientMessage(R"({"id":1,"method":"Runtime.evaluate","params":{"expression":"secret"},"sessionId":"S1"})");
  EXPECT_EQ(i.method, "Runtime.evaluate");
  EXPECT_EQ(i.session_id, "S1");
  EXPECT_FALSE(i.notable);
  auto p = InspectClientMessage(R"({"id":2,"method":"Target.createBrowserContext","params":{"proxyServer":"http://x:1"}})");
  EXPECT_TRUE(p.notable);
  EXPECT_NE(p.note.find("egress"), std::string::npos);
  EXPECT_FALSE(InspectClientMessage(R"({"id":2,"method":"Target.createBrowserContext","params":{}})").notable);
  EXPECT_TRUE(InspectClientMessage(R"({"id":3,"method":"Security.setIgnoreCertificateErrors"})").notable);
  EXPECT_FALSE(InspectClientMessage(R"({"id":3,"method":"Browser.setDownloadBehavior"})").notable);
  EXPECT_EQ(InspectClientMessage("garbage").method, "(not JSON)");
  std::string big = R"({"id":4,"method":"DOM.setFileInputFiles","params":{"x":")" + std::string(1 << 20, 'a') + "\"}}";
  EXPECT_EQ(InspectClientMessage(big).method, "DOM.setFileInputFiles");
}

}  // namespace
}  // namespace deskbox::cdp_proxy
