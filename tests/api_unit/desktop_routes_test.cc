// The desktop routes (screenshot, actions, cursor, the Anthropic and OpenAI adapters) and the
// live view (/vnc) against a fake guest screen (FakeRfbServer): what they answer, what reaches
// the guest's screen, and how a screen that fails is answered.
//
// Not here, because the wait is fixed and long: a screen that never becomes ready is answered
// 504 only after kMirrorReadyTimeout (20 s, api/src/desktop_routes.cc), and a live view whose
// guest never greets is answered 502 only after three 5 s greeting timeouts
// (ViewerBridgeOptions::greeting_timeout). The 504s below come from a sandbox whose pages are
// still reloading (vmhost WaitBrowserFresh), which fails at once.
#include <gtest/gtest.h>

#include "common/base64.h"
#include "guest_services_fixture.h"
#include "vnc_bridge/keys.h"

namespace deskbox::api {
namespace {

using testing::FakeRfbServer;
using vmhost::VmError;
using Pointer = FakeRfbServer::Pointer;
using Key = FakeRfbServer::Key;

// The width and height in a PNG's IHDR chunk.
std::pair<uint32_t, uint32_t> PngSize(const std::string& png) {
  auto u32 = [&](size_t at) {
    return uint32_t{static_cast<uint8_t>(png[at])} << 24 |
           uint32_t{static_cast<uint8_t>(png[at + 1])} << 16 |
           uint32_t{static_cast<uint8_t>(png[at + 2])} << 8 | static_cast<uint8_t>(png[at + 3]);
  };
  if (png.size() < 24 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return {0, 0};
  return {u32(16), u32(20)};
}

bool Contains(const std::vector<Pointer>& v, Pointer p) {
  return std::find(v.begin(), v.end(), p) != v.end();
}

class DesktopRoutesTest : public GuestServicesTest {
 protected:
  ClientResponse Post(const std::string& id, const std::string& route, const json& body,
                      const std::string& query = "") {
    return h_.Call(verb::post, "/v1/sandboxes/" + id + "/" + route + query, body.dump());
  }
};

TEST_F(DesktopRoutesTest, AScreenshotIsAnImageOfTheGuestScreenInTheSizeAsked) {
  std::string id = Create();
  auto r = h_.Call(verb::get, "/v1/sandboxes/" + id + "/screenshot");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "image/png");
  EXPECT_EQ(PngSize(r.body), std::make_pair(64u, 40u));
  EXPECT_EQ(r.header("X-Screen-Width"), "64");
  EXPECT_EQ(r.header("X-Screen-Height"), "40");
  EXPECT_EQ(r.header("X-Image-Width"), "64");
  EXPECT_EQ(r.header("X-Image-Height"), "40");
  EXPECT_GE(std::stoul(r.header("X-Frame-Seq")), 1u);
  // Scaled to the display the caller's model works in, or to an explicit width.
  r = h_.Call(verb::get, "/v1/sandboxes/" + id + "/screenshot?display=32x20");
  EXPECT_EQ(PngSize(r.body), std::make_pair(32u, 20u));
  EXPECT_EQ(r.header("X-Image-Width"), "32");
  r = h_.Call(verb::get, "/v1/sandboxes/" + id + "/screenshot?width=16");
  EXPECT_EQ(r.header("X-Image-Width"), "16");
  EXPECT_EQ(r.header("X-Image-Height"), "10") << "one side alone keeps the aspect ratio";
  r = h_.Call(verb::get, "/v1/sandboxes/" + id + "/screenshot?format=jpeg&quality=50", "",
              Token(id, "view"));
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(r.header("Content-Type"), "image/jpeg");
  EXPECT_EQ(r.body.substr(0, 2), "\xff\xd8");
  EXPECT_EQ(rfb.handshakes(), 1u) << "the mirror stays connected between calls";
}

TEST_F(DesktopRoutesTest, ActionsReachTheGuestScreenAndTheCursorFollows) {
  std::string id = Create();
  auto cursor = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/cursor"));
  EXPECT_EQ(cursor["x"], 32) << "X starts with the pointer in the middle of the screen";
  EXPECT_EQ(cursor["y"], 20);
  auto r = Post(id, "actions", {{"actions", {{{"type", "move"}, {"x", 10}, {"y", 20}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = Body(r);
  EXPECT_EQ(j["performed"], 1);
  EXPECT_EQ(j["cursor"], json({{"x", 10}, {"y", 20}}));
  EXPECT_EQ(j["screen"], json({{"width", 64}, {"height", 40}}));
  EXPECT_EQ(j["changed"], true) << "the fake redraws after input";
  EXPECT_EQ(j["settled"], true);
  EXPECT_TRUE(rfb.WaitFor([&] { return Contains(rfb.pointer_events(), {0, 10, 20}); }));
  cursor = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/cursor"));
  EXPECT_EQ(cursor["x"], 10);
  EXPECT_EQ(cursor["y"], 20);
  // In a declared display of half the screen's size, coordinates are mapped to the screen.
  r = Post(id, "actions",
           {{"display", "32x20"},
            {"settle", false},
            {"actions", {{{"type", "click"}, {"x", 10}, {"y", 5}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["cursor"], json({{"x", 10}, {"y", 5}}));
  EXPECT_TRUE(rfb.WaitFor([&] {
    auto p = rfb.pointer_events();
    return Contains(p, {1, 21, 11}) && p.back() == Pointer{0, 21, 11};
  })) << "pressed and released at the screen point";
  cursor = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/cursor?display=32x20"));
  EXPECT_EQ(cursor["x"], 10);
  EXPECT_EQ(cursor["y"], 5);
  // Text and key combos arrive as X keysyms, in order.
  r = Post(
      id, "actions",
      {{"settle", false},
       {"actions", {{{"type", "type"}, {"text", "hi"}}, {{"type", "key"}, {"keys", "ctrl+a"}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["performed"], 2);
  std::vector<Key> want = {{true, 'h'},
                           {false, 'h'},
                           {true, 'i'},
                           {false, 'i'},
                           {true, vnc_bridge::kKeysymControlL},
                           {true, 'a'},
                           {false, 'a'},
                           {false, vnc_bridge::kKeysymControlL}};
  EXPECT_TRUE(rfb.WaitFor([&] { return rfb.key_events() == want; }));
  // With the settled screen in the answer.
  r = Post(
      id, "actions",
      {{"actions", {{{"type", "move"}, {"x", 1}, {"y", 1}}}}, {"screenshot", {{"format", "png"}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  auto shot = Body(r)["screenshot"];
  EXPECT_EQ(shot["format"], "png");
  EXPECT_EQ(shot["width"], 64);
  EXPECT_EQ(PngSize(Base64Decode(shot["data"].get<std::string>()).value_or("")),
            std::make_pair(64u, 40u));
  // Every action is on the timeline, with who sent it.
  auto events = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events"))["events"];
  std::vector<std::string> types;
  for (const auto& e : events)
    if (e.contains("action")) types.push_back(e["action"]["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"move", "click", "type", "key", "move"}));
}

// A character beyond ASCII goes by the focused window's entry (computer_use/typing.h), which the
// guest's X helper names: GTK's Unicode entry for Chromium (ctrl+shift+u, hex digits, space,
// among the other keys), a paste through PRIMARY for xterm (the helper gets the text; the keys
// around it are typed).
TEST_F(DesktopRoutesTest, CharactersBeyondAsciiGoByTheFocusedWindowsEntry) {
  std::string id = Create();
  std::string focused = "chromium\tChromium\n";
  OnAgent(id, [&](vmhost::testing::FakeGuestAgent& a) {
    a.on_exec = [&focused](const vmhost::ExecSpec& spec) -> std::expected<vmhost::ExecResult, vmhost::AgentError> {
      vmhost::ExecResult out;
      if (spec.argv.size() >= 2 && spec.argv[1] == "focus") out.stdout_data = focused;
      return out;
    };
    return 0;
  });
  auto r = Post(id, "actions", {{"settle", false}, {"actions", {{{"type", "type"}, {"text", "aé"}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  using vnc_bridge::kKeysymControlL, vnc_bridge::kKeysymShiftL;
  std::vector<Key> want = {{true, 'a'},           {false, 'a'},          {true, kKeysymControlL},
                           {true, kKeysymShiftL}, {true, 'U'},           {false, 'U'},
                           {false, kKeysymShiftL}, {false, kKeysymControlL}, {true, 'e'},
                           {false, 'e'},          {true, '9'},           {false, '9'},
                           {true, ' '},           {false, ' '}};
  EXPECT_TRUE(rfb.WaitFor([&] { return rfb.key_events() == want; }));
  auto execs = OnAgent(id, [](vmhost::testing::FakeGuestAgent& a) { return a.execs; });
  ASSERT_EQ(execs.size(), 1u);
  EXPECT_EQ(execs[0].argv, (std::vector<std::string>{"/usr/lib/deskbox/deskbox-x11", "focus"}));

  // In xterm: "x " typed, "é y 世" pasted through the helper, " z" typed.
  focused = "xterm\tXTerm\n";
  rfb.ClearKeyEvents();
  r = Post(id, "actions", {{"settle", false}, {"actions", {{{"type", "type"}, {"text", "x é y 世 z"}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  execs = OnAgent(id, [](vmhost::testing::FakeGuestAgent& a) { return a.execs; });
  ASSERT_EQ(execs.size(), 3u);
  EXPECT_EQ(execs[2].argv[1], "paste-primary");
  EXPECT_EQ(execs[2].stdin_data, "é y 世");
  std::vector<Key> typed = {{true, 'x'}, {false, 'x'}, {true, ' '}, {false, ' '},
                            {true, ' '}, {false, ' '}, {true, 'z'}, {false, 'z'}};
  EXPECT_TRUE(rfb.WaitFor([&] { return rfb.key_events() == typed; }));

  // ASCII alone asks the guest nothing.
  r = Post(id, "actions", {{"settle", false}, {"actions", {{{"type", "type"}, {"text", "plain"}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(OnAgent(id, [](vmhost::testing::FakeGuestAgent& a) { return a.execs.size(); }), 3u);

  // A paste the focused window never reads is an error that says so.
  OnAgent(id, [&](vmhost::testing::FakeGuestAgent& a) {
    a.on_exec = [&focused](const vmhost::ExecSpec& spec) -> std::expected<vmhost::ExecResult, vmhost::AgentError> {
      vmhost::ExecResult out;
      if (spec.argv[1] == "focus") {
        out.stdout_data = focused;
      } else {
        out.exit_code = 5;
        out.stderr_data = "deskbox-x11: the focused window did not read the pasted text\n";
      }
      return out;
    };
    return 0;
  });
  r = Post(id, "actions", {{"settle", false}, {"actions", {{{"type", "type"}, {"text", "ü"}}}}});
  EXPECT_NE(r.status, 200u);
  EXPECT_NE(r.body.find("did not read the pasted text"), std::string::npos) << r.body;
}

TEST_F(DesktopRoutesTest, TheAnthropicAdapterAnswersAToolResult) {
  std::string id = Create();
  auto r = Post(id, "computer/anthropic", {{"action", "screenshot"}});
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = Body(r);
  EXPECT_EQ(j["type"], "tool_result");
  EXPECT_EQ(j["is_error"], false);
  ASSERT_EQ(j["content"].size(), 1u);
  EXPECT_EQ(j["content"][0]["type"], "image");
  EXPECT_EQ(j["content"][0]["source"]["media_type"], "image/png");
  EXPECT_EQ(
      PngSize(Base64Decode(j["content"][0]["source"]["data"].get<std::string>()).value_or("")),
      std::make_pair(64u, 40u));
  // A whole tool_use block: the answer names it; the click reaches the screen.
  r = Post(id, "computer/anthropic",
           {{"type", "tool_use"},
            {"id", "toolu_01"},
            {"name", "computer"},
            {"input", {{"action", "left_click"}, {"coordinate", {5, 6}}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["tool_use_id"], "toolu_01");
  EXPECT_EQ(Body(r)["content"][0]["type"], "image");
  EXPECT_TRUE(rfb.WaitFor([&] { return Contains(rfb.pointer_events(), {1, 5, 6}); }));
  // cursor_position is text; a double click waits for the screen to take the first click.
  ASSERT_EQ(
      Post(id, "computer/anthropic", {{"action", "mouse_move"}, {"coordinate", {7, 8}}}).status,
      200u);
  j = Body(Post(id, "computer/anthropic", {{"action", "cursor_position"}}));
  EXPECT_EQ(j["content"][0], json({{"type", "text"}, {"text", "X=7,Y=8"}}));
  size_t fences = rfb.fences_answered();
  ASSERT_EQ(
      Post(id, "computer/anthropic", {{"action", "double_click"}, {"coordinate", {9, 9}}}).status,
      200u);
  EXPECT_GT(rfb.fences_answered(), fences);
  // What the model got wrong is the model's to read, not an HTTP error.
  r = Post(id, "computer/anthropic", {{"action", "fly"}});
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["is_error"], true);
  r = Post(id, "computer/anthropic", {{"action", "left_click"}, {"coordinate", {500, 6}}});
  EXPECT_EQ(Body(r)["is_error"], true) << "a point off the display";
}

TEST_F(DesktopRoutesTest, TheOpenAiAdapterAnswersAComputerCallOutput) {
  std::string id = Create();
  auto r = Post(id, "computer/openai",
                {{"type", "computer_call"},
                 {"call_id", "call_7"},
                 {"action", {{"type", "click"}, {"x", 3}, {"y", 4}, {"button", "left"}}}});
  ASSERT_EQ(r.status, 200u) << r.body;
  auto j = Body(r);
  EXPECT_EQ(j["type"], "computer_call_output");
  EXPECT_EQ(j["call_id"], "call_7");
  EXPECT_EQ(j["output"]["type"], "computer_screenshot");
  std::string url = j["output"]["image_url"];
  const std::string prefix = "data:image/png;base64,";
  ASSERT_TRUE(url.starts_with(prefix)) << url.substr(0, 40);
  EXPECT_EQ(PngSize(Base64Decode(url.substr(prefix.size())).value_or("")),
            std::make_pair(64u, 40u));
  EXPECT_TRUE(rfb.WaitFor([&] { return Contains(rfb.pointer_events(), {1, 3, 4}); }));
  // A bare action, JPEG in a declared display.
  r = Post(id, "computer/openai", {{"type", "screenshot"}}, "?format=jpeg&display=32x20");
  ASSERT_EQ(r.status, 200u) << r.body;
  EXPECT_TRUE(
      Body(r)["output"]["image_url"].get<std::string>().starts_with("data:image/jpeg;base64,"));
  // An action the guest's RFB cannot carry is the caller's error.
  r = Post(id, "computer/openai", {{"type", "click"}, {"x", 1}, {"y", 1}, {"button", "forward"}});
  EXPECT_EQ(r.status, 400u) << r.body;
  EXPECT_EQ(Code(r), "invalid_request");
}

// 7 type actions of 10,000 characters each, within the limits: their key events (over 1 MiB)
// are written as they are queued, and all 7 are performed (they once passed the mirror's cap on
// unsent input and failed 500 with a guest that read everything).
TEST_F(DesktopRoutesTest, LongTextWithinTheLimitsReachesAHealthyScreen) {
  std::string id = Create();
  json type = {{"type", "type"}, {"text", std::string(10000, 'a')}};
  auto r = Post(
      id, "actions",
      {{"settle", false}, {"actions", json::array({type, type, type, type, type, type, type})}});
  EXPECT_EQ(r.status, 200u) << r.body;
  EXPECT_EQ(Body(r)["performed"], 7);
}

TEST_F(DesktopRoutesTest, AScreenResizedDuringACallIs502) {
  std::string id = Create();
  ASSERT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id + "/screenshot").status, 200u);
  struct Step {
    std::string route;
    json body;
  };
  std::vector<Step> steps = {
      {"actions", {{"actions", {{{"type", "move"}, {"x", 1}, {"y", 1}}}}, {"screenshot", true}}},
      {"computer/anthropic", {{"action", "left_click"}, {"coordinate", {2, 2}}}},
      {"computer/openai", {{"type", "click"}, {"x", 3}, {"y", 3}}},
  };
  uint16_t side = 80;
  for (const auto& s : steps) {
    rfb.ResizeOnNextInput(side, 50);
    side += 2;
    auto r = Post(id, s.route, s.body);
    EXPECT_EQ(r.status, 502u) << s.route << ": " << r.body;
    EXPECT_EQ(Code(r), "guest_error") << s.route;
    EXPECT_NE(r.body.find("lost or resized"), std::string::npos) << r.body;
  }
  // The next call works in the new screen.
  auto r = h_.Call(verb::get, "/v1/sandboxes/" + id + "/screenshot");
  EXPECT_EQ(r.header("X-Screen-Width"), "84");
}

TEST_F(DesktopRoutesTest, AScreenStillReloadingItsPagesIs504) {
  std::string id = Create();
  OnHost([](FakeSandboxHost& host) {
    host.fail_browser_fresh = VmError{VmError::Code::kTimeout, "the pages did not reload in 120 s"};
  });
  std::vector<std::pair<verb, std::pair<std::string, std::string>>> calls = {
      {verb::get, {"screenshot", ""}},
      {verb::get, {"cursor", ""}},
      {verb::post, {"actions", R"({"actions": [{"type": "move", "x": 1, "y": 1}]})"}},
      {verb::post, {"computer/anthropic", R"({"action": "screenshot"})"}},
      {verb::post, {"computer/openai", R"({"type": "screenshot"})"}},
  };
  for (const auto& [method, call] : calls) {
    auto r = h_.Call(method, "/v1/sandboxes/" + id + "/" + call.first, call.second);
    EXPECT_EQ(r.status, 504u) << call.first << ": " << r.body;
    EXPECT_EQ(Code(r), "guest_timeout") << call.first;
  }
}

// The client side of an RFB 3.8 handshake through the live view, up to ServerInit.
bool ViewerHandshake(testing::WebSocketClient& ws) {
  std::string got;
  auto read_until = [&](size_t n) {
    while (got.size() < n) {
      auto m = ws.Read();
      if (!m) return false;
      got += *m;
    }
    return true;
  };
  if (!read_until(12) || got.substr(0, 12) != "RFB 003.008\n") return false;
  got.erase(0, 12);
  if (!ws.Write("RFB 003.008\n", true) || !read_until(2) || got.substr(0, 2) != std::string{1, 1})
    return false;
  got.erase(0, 2);
  if (!ws.Write(std::string{1}, true) || !read_until(4)) return false;
  got.erase(0, 4);
  return ws.Write(std::string{0}, true) && read_until(24 + 12);  // ServerInit, name "deskbox-test"
}

std::string PointerMessage(uint8_t buttons, uint16_t x, uint16_t y) {
  return std::string{5,
                     static_cast<char>(buttons),
                     static_cast<char>(x >> 8),
                     static_cast<char>(x),
                     static_cast<char>(y >> 8),
                     static_cast<char>(y)};
}

TEST_F(DesktopRoutesTest, TheLiveViewRelaysTheScreenAndDropsAWatchersInput) {
  std::string id = Create();
  std::string view = Token(id, "view"), control = Token(id, "control");
  auto watcher =
      Socket("/v1/sandboxes/" + id + "/vnc?token=" + view, {{"Sec-WebSocket-Protocol", "binary"}});
  ASSERT_EQ(watcher->status(), 101u);
  EXPECT_EQ(watcher->header("Sec-WebSocket-Protocol"), "binary");
  ASSERT_TRUE(ViewerHandshake(*watcher));
  EXPECT_TRUE(watcher->got_binary());
  auto controller = Socket("/v1/sandboxes/" + id + "/vnc", Bearer(control));
  ASSERT_EQ(controller->status(), 101u);
  ASSERT_TRUE(ViewerHandshake(*controller));
  ASSERT_TRUE(watcher->Write(PointerMessage(1, 7, 8), true));
  ASSERT_TRUE(controller->Write(PointerMessage(1, 3, 4), true));
  EXPECT_TRUE(rfb.WaitFor([&] { return Contains(rfb.pointer_events(), {1, 3, 4}); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(Contains(rfb.pointer_events(), {1, 7, 8})) << "a view token only watches";
  watcher->Close();
  controller->Close();
  ASSERT_TRUE(WaitNotInUse(id));
  // The input is on the timeline, dropped or not.
  std::vector<bool> dropped;
  auto events = Body(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events"))["events"];
  for (const auto& e : events)
    if (e.contains("viewer_input") && e["viewer_input"]["kind"] == "pointer")
      dropped.push_back(e["viewer_input"].value("dropped", false));
  std::sort(dropped.begin(), dropped.end());
  EXPECT_EQ(dropped, (std::vector<bool>{false, true})) << events.dump().substr(0, 3000);
}

TEST_F(DesktopRoutesTest, PausingTheSandboxClosesItsViewers) {
  std::string id = Create();
  auto viewer = Socket("/v1/sandboxes/" + id + "/vnc", Bearer(h_.key()));
  ASSERT_EQ(viewer->status(), 101u);
  ASSERT_TRUE(viewer->Read()) << "the greeting";
  ASSERT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause").status, 200u);
  while (viewer->Read()) {
  }
  ASSERT_TRUE(viewer->closed());
  EXPECT_EQ(viewer->closed()->code, 1001);
  EXPECT_EQ(std::string(viewer->closed()->reason.data(), viewer->closed()->reason.size()),
            "sandbox paused");
  viewer->Close();
  EXPECT_TRUE(WaitNotInUse(id));
}

TEST_F(DesktopRoutesTest, ALiveViewOfAScreenThatIsAbsentOrHangsUpIs502) {
  std::string id = Create();
  rfb.SetBehaviour(FakeRfbServer::Behaviour::kClosing);
  auto viewer = Socket("/v1/sandboxes/" + id + "/vnc", Bearer(h_.key()));
  EXPECT_EQ(viewer->status(), 502u);
  EXPECT_NE(viewer->response().body().find("guest_error"), std::string::npos)
      << viewer->response().body();
  EXPECT_EQ(rfb.connections(), 3u) << "three attempts";
  OnHost([](FakeSandboxHost& host) { host.guest_ports.clear(); });
  auto r = h_.Send(verb::get, "/v1/sandboxes/" + id + "/vnc", h_.key(),
                   {{"Upgrade", "websocket"},
                    {"Connection", "Upgrade"},
                    {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                    {"Sec-WebSocket-Version", "13"}});
  EXPECT_EQ(r.status, 502u) << r.body;
  EXPECT_EQ(Code(r), "guest_error");
  EXPECT_NE(r.body.find("no guest listens on 5900"), std::string::npos) << r.body;
}

TEST_F(DesktopRoutesTest, ASandboxTakesAtMost32Viewers) {
  std::string id = Create();
  std::vector<std::unique_ptr<testing::WebSocketClient>> viewers;
  for (int i = 0; i < 32; ++i) {
    viewers.push_back(Socket("/v1/sandboxes/" + id + "/vnc", Bearer(h_.key())));
    ASSERT_EQ(viewers.back()->status(), 101u) << "viewer " << i;
  }
  auto r = h_.Send(verb::get, "/v1/sandboxes/" + id + "/vnc", h_.key(),
                   {{"Upgrade", "websocket"},
                    {"Connection", "Upgrade"},
                    {"Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="},
                    {"Sec-WebSocket-Version", "13"}});
  EXPECT_EQ(r.status, 429u) << r.body;
  EXPECT_EQ(Code(r), "rate_limited");
  viewers.clear();
  EXPECT_TRUE(WaitNotInUse(id));
  auto again = Socket("/v1/sandboxes/" + id + "/vnc", Bearer(h_.key()));
  EXPECT_EQ(again->status(), 101u) << "room again once they left";
  again->Close();
  EXPECT_TRUE(WaitNotInUse(id));
}

}  // namespace
}  // namespace deskbox::api
