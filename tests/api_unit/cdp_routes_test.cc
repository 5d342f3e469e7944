// The CDP routes against a fake guest browser (FakeDevTools): the json/* discovery answers with
// every URL rewritten to deskboxd, the DevTools WebSockets relayed and audited, and how a browser
// that is absent, answers garbage or refuses is answered.
//
// Not here: a browser that never answers is answered 502 only after CdpProxyOptions::
// guest_timeout (15 s, not configurable through CdpRoutes).
#include <gtest/gtest.h>

#include "guest_services_fixture.h"

namespace deskbox::api {
namespace {

using testing::FakeDevTools;

const std::string kBrowser = FakeDevTools::kBrowserId;
const std::string kPage = FakeDevTools::kFirstPage;

class CdpRoutesTest : public GuestServicesTest {
 protected:
  void SetUp() override {
    GuestServicesTest::SetUp();
    id_ = Create();
    base_ = "/v1/sandboxes/" + id_ + "/cdp";
    public_ = fmt::format("127.0.0.1:{}/v1/sandboxes/{}/cdp", h_.port(), id_);
  }
  void TearDown() override { EXPECT_TRUE(WaitNotInUse(id_)); }
  ClientResponse Get(const std::string& route, const std::string& bearer = "") {
    return h_.Call(verb::get, base_ + route, "", bearer.empty() ? h_.key() : bearer);
  }
  std::string id_, base_, public_;  // public_: where clients reach this sandbox's CDP
};

TEST_F(CdpRoutesTest, TheVersionPointsClientsAtDeskboxdNotTheGuest) {
  auto r = Get("/json/version");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = Body(r);
  EXPECT_EQ(j["Browser"], "Chrome/156.0.8078.108");
  EXPECT_EQ(j["Protocol-Version"], "1.3");
  EXPECT_EQ(j["webSocketDebuggerUrl"], "ws://" + public_ + "/devtools/browser/" + kBrowser);
  EXPECT_EQ(r.body.find("10.88.0.2"), std::string::npos) << r.body;
  // A credential given as ?token= is carried into the URL (for clients that cannot set headers).
  std::string cdp = Token(id_, "cdp");
  r = h_.Send(verb::get, base_ + "/json/version/?token=" + cdp, "", {});
  ASSERT_EQ(r.status, 200u) << "a trailing slash, as Playwright sends: " << r.body;
  EXPECT_EQ(Body(r)["webSocketDebuggerUrl"],
            "ws://" + public_ + "/devtools/browser/" + kBrowser + "?token=" + cdp);
  // The endpoint itself, without an upgrade, answers the same.
  r = Get("", cdp);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["webSocketDebuggerUrl"], "ws://" + public_ + "/devtools/browser/" + kBrowser);
  EXPECT_EQ(devtools.requests().back(), "GET /json/version");
}

TEST_F(CdpRoutesTest, TargetsAreListedWithTheirUrlsRewritten) {
  for (const char* route : {"/json/list", "/json"}) {
    auto r = Get(route);
    ASSERT_EQ(r.status, 200u) << route << ": " << r.body;
    auto list = Body(r);
    ASSERT_EQ(list.size(), 1u) << r.body;
    EXPECT_EQ(list[0]["id"], kPage);
    EXPECT_EQ(list[0]["type"], "page");
    EXPECT_EQ(list[0]["title"], "New Tab");
    EXPECT_EQ(list[0]["url"], "chrome://newtab/");
    EXPECT_EQ(list[0]["webSocketDebuggerUrl"], "ws://" + public_ + "/devtools/page/" + kPage);
    EXPECT_EQ(list[0]["devtoolsFrontendUrl"], "devtools://devtools/bundled/inspector.html?ws=" +
                                                  public_ + "/devtools/page/" + kPage);
  }
}

TEST_F(CdpRoutesTest, TabsOpenActivateAndClose) {
  auto r = h_.Call(verb::put, base_ + "/json/new?url=https%3A%2F%2Fexample.com%2Fa%20b");
  ASSERT_EQ(r.status, 200u) << r.body;
  auto tab = Body(r);
  std::string tab_id = tab["id"];
  EXPECT_EQ(tab["url"], "https://example.com/a%20b") << "the URL reaches the browser as one query";
  EXPECT_EQ(tab["webSocketDebuggerUrl"], "ws://" + public_ + "/devtools/page/" + tab_id);
  EXPECT_EQ(devtools.requests().back(), "PUT /json/new?https://example.com/a%20b");
  EXPECT_EQ(Body(Get("/json/list")).size(), 2u);
  r = Get("/json/activate/" + tab_id);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, "Target activated");
  EXPECT_TRUE(r.header("Content-Type").starts_with("text/plain"));
  r = Get("/json/close/" + tab_id);
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.body, "Target is closing");
  EXPECT_EQ(devtools.target_ids(), std::vector<std::string>{kPage});
  // A target the browser does not have is its 404; a malformed id never reaches it.
  r = Get("/json/close/" + tab_id);
  EXPECT_EQ(r.status, 404u) << r.body;
  EXPECT_EQ(Code(r), "not_found");
  size_t asked = devtools.requests().size();
  r = Get("/json/activate/not_a_target");
  EXPECT_EQ(r.status, 404u) << r.body;
  EXPECT_EQ(Code(r), "not_found");
  EXPECT_EQ(devtools.requests().size(), asked);
}

TEST_F(CdpRoutesTest, ABrowserThatIsAbsentAnswersGarbageOrFailsIs502) {
  auto expect_502 = [&](verb m, const std::string& route, const std::string& why) {
    auto r = h_.Call(m, base_ + route);
    EXPECT_EQ(r.status, 502u) << why << ", " << route << ": " << r.body;
    EXPECT_EQ(Code(r), "guest_error") << why << ", " << route;
  };
  devtools.SetBehaviour(FakeDevTools::Behaviour::kGarbage);
  for (const char* route : {"", "/json/version", "/json/list", "/json"})
    expect_502(verb::get, route, "not JSON");
  expect_502(verb::put, "/json/new", "not JSON");
  devtools.SetBehaviour(FakeDevTools::Behaviour::kFailing);
  expect_502(verb::get, "/json/version", "status 500");
  expect_502(verb::put, "/json/new", "status 500");
  expect_502(verb::get, "/json/activate/" + kPage, "status 500");
  expect_502(verb::get, "/json/close/" + kPage, "status 500");
  devtools.SetBehaviour(FakeDevTools::Behaviour::kNormal);
  OnHost([](FakeSandboxHost& host) { host.guest_ports.clear(); });
  for (const char* route : {"", "/json/version", "/json/list", "/json"})
    expect_502(verb::get, route, "nothing listening");
  expect_502(verb::put, "/json/new", "nothing listening");
  expect_502(verb::get, "/json/activate/" + kPage, "nothing listening");
  // However vmhost fails to make the connection.
  OnHost([](FakeSandboxHost& host) {
    host.fail_connect = vmhost::VmError{vmhost::VmError::Code::kJailer, "the jailer is gone"};
  });
  expect_502(verb::get, "/json/list", "no connection into the netns");
  expect_502(verb::get, "/json/close/" + kPage, "no connection into the netns");
}

TEST_F(CdpRoutesTest, SocketsRelayCdpToTheBrowserAndAuditEveryCommand) {
  std::string cdp = Token(id_, "cdp");
  for (const std::string& target :
       {base_ + "?token=" + cdp, base_ + "/devtools/browser/" + kBrowser + "?token=" + cdp,
        base_ + "/devtools/page/" + kPage + "?token=" + cdp}) {
    auto ws = Socket(target);
    ASSERT_EQ(ws->status(), 101u) << target;
    EXPECT_FALSE(ws->header("X-Request-Id").empty());
    ASSERT_TRUE(ws->Write(R"({"id": 1, "method": "Browser.getVersion"})"));
    auto answer = ws->Read();
    ASSERT_TRUE(answer) << target;
    EXPECT_EQ(ParseJson(*answer).value_or(json()),
              json({{"id", 1}, {"result", {{"method", "Browser.getVersion"}}}}));
    ws->Close();
  }
  EXPECT_TRUE(devtools.WaitFor([&] { return devtools.sockets_open() == 0; }));
  EXPECT_EQ(devtools.messages().size(), 3u);
  ASSERT_TRUE(WaitNotInUse(id_));
  // Each command is on the timeline (its method, never its params), attributed to the token.
  size_t audited = 0;
  auto events = Body(h_.Call(verb::get, "/v1/sandboxes/" + id_ + "/events"))["events"];
  for (const auto& e : events) {
    if (!e.contains("cdp")) continue;
    ++audited;
    EXPECT_EQ(e["cdp"]["method"], "Browser.getVersion");
    EXPECT_EQ(e["actor"]["kind"], "token");
  }
  EXPECT_EQ(audited, 3u) << events.dump().substr(0, 3000);
  EXPECT_NE(h_.Call(verb::get, "/metrics")
                .body.find("deskbox_cdp_messages_total{method=\"Browser.getVersion\"} 3"),
            std::string::npos);
}

TEST_F(CdpRoutesTest, SocketsToABrowserThatIsAbsentAre502) {
  OnHost([](FakeSandboxHost& host) { host.guest_ports.clear(); });
  for (const std::string& target :
       {base_, base_ + "/devtools/browser/" + kBrowser, base_ + "/devtools/page/" + kPage}) {
    auto r = Socket(target, Bearer(h_.key()));
    EXPECT_EQ(r->status(), 502u) << target;
    EXPECT_NE(r->response().body().find("guest_error"), std::string::npos) << r->response().body();
  }
}

// A browser that refuses deskboxd's WebSocket handshake: 404 `not_found` for a target it does
// not have, 502 `guest_error` otherwise. (This crashed deskboxd once: the answer's message was a
// conditional of string temporaries inside a co_await, which g++ 12 destroyed twice.)
TEST_F(CdpRoutesTest, SocketsTheBrowserRefusesAre404Or502) {
  auto r = Socket(base_ + "/devtools/page/ABCDEF0123", Bearer(h_.key()));
  EXPECT_EQ(r->status(), 404u) << "a target the browser does not have";
  EXPECT_NE(r->response().body().find("not_found"), std::string::npos) << r->response().body();
  r = Socket(base_ + "/devtools/browser/00000000-0000-4000-8000-000000000000", Bearer(h_.key()));
  EXPECT_EQ(r->status(), 404u) << "a browser id the browser does not have";
  devtools.SetBehaviour(FakeDevTools::Behaviour::kRefusingSockets);
  r = Socket(base_ + "/devtools/page/" + kPage, Bearer(h_.key()));
  EXPECT_EQ(r->status(), 502u);
  EXPECT_NE(r->response().body().find("guest_error"), std::string::npos) << r->response().body();
}

TEST_F(CdpRoutesTest, PausingTheSandboxEndsItsSessionsWithTheReason) {
  auto ws = Socket(base_, Bearer(h_.key()));
  ASSERT_EQ(ws->status(), 101u);
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id_ + "/pause").status, 200u);
  EXPECT_FALSE(ws->Read());
  ASSERT_TRUE(ws->closed());
  EXPECT_EQ(ws->closed()->code, 1001);
  EXPECT_EQ(std::string(ws->closed()->reason.data(), ws->closed()->reason.size()),
            "sandbox paused");
  ws->Close();
  // A new session to a sandbox that is not running is refused.
  auto r = Socket(base_, Bearer(h_.key()));
  EXPECT_EQ(r->status(), 409u);
  EXPECT_NE(r->response().body().find("invalid_state"), std::string::npos);
}

TEST_F(CdpRoutesTest, ASandboxTakesAtMost32CdpSessions) {
  std::vector<std::unique_ptr<testing::WebSocketClient>> sessions;
  for (int i = 0; i < 32; ++i) {
    sessions.push_back(Socket(base_ + "/devtools/page/" + kPage, Bearer(h_.key())));
    ASSERT_EQ(sessions.back()->status(), 101u) << "session " << i;
  }
  for (const std::string& target :
       {base_, base_ + "/devtools/browser/" + kBrowser, base_ + "/devtools/page/" + kPage}) {
    auto r = Socket(target, Bearer(h_.key()));
    EXPECT_EQ(r->status(), 429u) << target;
    EXPECT_NE(r->response().body().find("rate_limited"), std::string::npos) << r->response().body();
  }
  EXPECT_NE(h_.Call(verb::get, "/metrics").body.find("deskbox_cdp_sessions 32"), std::string::npos);
  sessions.clear();
}

}  // namespace
}  // namespace deskbox::api
