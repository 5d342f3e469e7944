// Every operation of api/openapi.yaml and every response code it documents, asserted against the
// whole API running on fakes (FakeSandboxHost with fake guest agents, a fake guest screen and
// browser, a fake clock; no root, no QEMU), status and error code alike.
//
// One row per operation (Rows()) lists requests and the answer each must get. The 401 and 403
// probes are not in the rows: they follow from the spec's own `security`, `x-scopes` and
// `x-token-in-query` (AuthCases). The spec file is read at test time, and three checks keep the
// table whole: every operation of the spec has a row and no row is for something else; deskboxd
// serves exactly the spec's operations; every documented code is asserted by a row, proven by a
// named test elsewhere (kProvenIn), or listed in kNotHermetic with the reason no request can
// produce it here.
//
// Where deskboxd and the spec disagree, the test is written to the spec, marked SPEC:, and
// disabled (spec_findings_test.cc and others; kSpecFindings lists them).
//
// The rows are data: most of this file's length is the table, one entry per operation.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "openapi_spec.h"
#include "spec_codes_fixture.h"

namespace deskbox::api::spec_codes {
namespace {

using testing::FindOperation;
using testing::Spec;
using testing::SpecOperation;

// ---- The rows ----

const std::vector<Row>& Rows() {
  using S = Sandbox;
  using B = FakeDevTools::Behaviour;
  static const std::vector<Row> rows = {
      {"GET",
       "/healthz",
       "getHealth",
       {},
       {Answers(200, "no credential", {.no_credential = true})}},
      {"GET", "/metrics", "getMetrics", {}, {Answers(200, "the API key")}},
      {"GET", "/v1/templates", "listTemplates", {}, {Answers(200, "the API key")}},
      {"POST",
       "/v1/sandboxes",
       "createSandbox",
       {.body = "{}"},
       {Answers(201, "an empty request"), Bad("a timeout of 0", {.body = R"({"timeout_s": 0})"}),
        NotJson(), OverLimit(),
        Refuses(422, "unknown_template", "a template not served",
                {.body = R"({"template": "other"})"}),
        Refuses(422, "unsupported_resolution", "a 100x100 screen",
                {.body = R"({"resolution": {"width": 100, "height": 100}})"}),
        Refuses(429, "sandbox_limit", "vmhost out of slots", {},
                FailCreate(VmError::Code::kCapacity)),
        Refuses(500, "internal", "the jailer failing", {}, FailCreate(VmError::Code::kJailer)),
        Refuses(502, "guest_error", "the guest failing to start", {},
                FailCreate(VmError::Code::kGuest)),
        Refuses(504, "guest_timeout", "the guest not answering", {},
                FailCreate(VmError::Code::kTimeout)),
        StateDiskFull(), StateDiskFailing()}},
      {"GET",
       "/v1/sandboxes",
       "listSandboxes",
       {},
       {Answers(200, "no filter"), Answers(200, "a state", {.query = "?state=paused"}),
        Bad("an unknown state", {.query = "?state=asleep"})}},
      {"GET",
       "/v1/sandboxes/{id}",
       "getSandbox",
       {},
       {Answers(200, "a running sandbox"),
        Answers(200, "a stopped sandbox", {.sandbox = S::kStopped}),
        Answers(200, "a view token", {.token_scope = "view"}), UnknownSandbox()}},
      {"PATCH",
       "/v1/sandboxes/{id}",
       "updateSandbox",
       {.body = R"({"timeout_s": 600, "metadata": {"team": "a"}})"},
       {Answers(200, "a running sandbox"),
        Answers(200, "a paused sandbox", {.sandbox = S::kPaused}),
        Answers(200, "a control token", {.token_scope = "control"}),
        Bad("a negative timeout", {.body = R"({"timeout_s": -1})"}), NotJson(), UnknownSandbox(),
        WhenStopped(), OverLimit(), StateDiskFull(), StateDiskFailing()}},
      {"DELETE",
       "/v1/sandboxes/{id}",
       "deleteSandbox",
       {},
       {Answers(204, "a running sandbox", {.sandbox = S::kFresh}),
        Answers(204, "a stopped sandbox, again", {.sandbox = S::kStopped}), UnknownSandbox()}},
      {"POST",
       "/v1/sandboxes/{id}/pause",
       "pauseSandbox",
       {.sandbox = S::kFresh},
       {Answers(200, "a running sandbox"),
        Answers(200, "a control token", {.token_scope = "control"}), WhenPaused(), UnknownSandbox(),
        Runs(410, "sandbox_gone", "a delete while vmhost pauses",
             [](SpecCodesTest& t) { return t.GoneDuringLifecycleCall(false); }),
        Refuses(500, "internal", "QEMU failing", {}, FailPause(VmError::Code::kQemu)),
        Refuses(502, "guest_error", "the guest failing", {}, FailPause(VmError::Code::kGuest)),
        Refuses(504, "guest_timeout", "QEMU not answering", {},
                FailPause(VmError::Code::kTimeout))}},
      {"POST",
       "/v1/sandboxes/{id}/resume",
       "resumeSandbox",
       {.sandbox = S::kFreshPaused},
       {Answers(200, "a paused sandbox"),
        Refuses(409, "invalid_state", "a running sandbox", {.sandbox = S::kRunning}),
        UnknownSandbox(),
        Runs(410, "sandbox_gone", "a delete while vmhost resumes",
             [](SpecCodesTest& t) { return t.GoneDuringLifecycleCall(true); }),
        Refuses(500, "internal", "QEMU failing", {}, FailResume(VmError::Code::kQemu)),
        Refuses(502, "guest_error", "the guest failing", {}, FailResume(VmError::Code::kAgent)),
        Refuses(504, "guest_timeout", "QEMU not answering", {},
                FailResume(VmError::Code::kTimeout))}},
      {"POST",
       "/v1/sandboxes/{id}/exec",
       "execInSandbox",
       {.body = R"({"shell": "true"})"},
       {Answers(200, "a command"), Answers(200, "a control token", {.token_scope = "control"}),
        Bad("neither argv nor shell", {.body = "{}"}), NotJson(), UnknownSandbox(), WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the command runs",
             [](SpecCodesTest& t) { return t.GoneDuringAgentCall(); }),
        OverLimit(),
        Refuses(502, "guest_error", "the agent's channel closing", {.sandbox = S::kFresh},
                ExecFails(kChannelClosed)),
        Refuses(502, "guest_error", "no agent connection", {.sandbox = S::kFresh},
                [](SpecCodesTest& t, const std::string& id) {
                  t.OnHost([&](FakeSandboxHost& h) { h.agents.erase(id); });
                }),
        Refuses(504, "guest_timeout", "the agent not answering", {.sandbox = S::kFresh},
                ExecFails(kAgentTimeout))}},
      {"PUT",
       "/v1/sandboxes/{id}/files",
       "writeFile",
       {.query = "?path=/tmp/spec.txt&mode=0600", .body = "hello"},
       {Answers(200, "an upload"),
        Refuses(400, "invalid_path", "a relative path", {.query = "?path=tmp/x"}),
        Bad("no path", {.query = ""}),
        Bad("a mode that is not octal", {.query = "?path=/tmp/x&mode=999"}), UnknownSandbox(),
        Refuses(404, "file_not_found", "a missing parent directory", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) {
                  a.write_error = AgentError{AgentError::Code::kGuest, "no such directory",
                                             agent::v1::Error::NOT_FOUND};
                })),
        WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the file is written",
             [](SpecCodesTest& t) { return t.GoneDuringAgentCall(); }),
        Runs(413, "payload_too_large", "a Content-Length over 1 GiB",
             [](SpecCodesTest& t) { return t.FileOverLimit(); }),
        Refuses(502, "guest_error", "the agent's channel closing", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.write_error = kChannelClosed; })),
        Refuses(504, "guest_timeout", "the agent not answering", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.write_error = kAgentTimeout; }))}},
      {"GET",
       "/v1/sandboxes/{id}/files",
       "readFile",
       {.query = "?path=/tmp/spec.txt"},
       {Answers(200, "a file the guest has", {},
                WithAgent([](FakeGuestAgent& a) { a.files["/tmp/spec.txt"] = "hello"; })),
        Refuses(400, "invalid_path", "a path with ..", {.query = "?path=/tmp/../etc/shadow"}),
        Bad("an unknown parameter", {.query = "?path=/tmp/x&mode=0644"}), UnknownSandbox(),
        Refuses(404, "file_not_found", "a file the guest does not have", {.query = "?path=/nope"}),
        WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the file is opened",
             [](SpecCodesTest& t) { return t.GoneDuringAgentCall(); }),
        Refuses(413, "payload_too_large", "a file over 1 GiB", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) {
                  a.read_error = AgentError{AgentError::Code::kGuest, "larger than allowed",
                                            agent::v1::Error::TOO_LARGE};
                })),
        Refuses(502, "guest_error", "the agent's channel closing", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.read_error = kChannelClosed; })),
        Refuses(504, "guest_timeout", "the agent not answering", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.read_error = kAgentTimeout; }))}},
      {"GET",
       "/v1/sandboxes/{id}/screenshot",
       "getScreenshot",
       {},
       {Answers(200, "the screen"), Answers(200, "a view token", {.token_scope = "view"}),
        Bad("an unknown format", {.query = "?format=gif"}), UnknownSandbox(), WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the screen connects",
             [](SpecCodesTest& t) { return t.GoneWhileScreenConnects(); }),
        Refuses(504, "guest_timeout", "pages still reloading", {}, PagesStillReloading())}},
      {"POST",
       "/v1/sandboxes/{id}/actions",
       "performActions",
       {.body = R"({"actions": [{"type": "move", "x": 1, "y": 1}], "settle": false})"},
       {Answers(200, "a move"), Bad("no actions", {.body = "{}"}),
        Bad("a point off the screen",
            {.body = R"({"actions": [{"type": "move", "x": 500, "y": 1}]})"}),
        NotJson(), UnknownSandbox(), WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the screen connects",
             [](SpecCodesTest& t) { return t.GoneWhileScreenConnects(); }),
        OverLimit(),
        Refuses(502, "guest_error", "a screen resized during the actions",
                {.sandbox = S::kFresh,
                 .body = R"({"actions": [{"type": "move", "x": 1, "y": 1}], "screenshot": true})"},
                ScreenResizesOnInput()),
        Refuses(504, "guest_timeout", "pages still reloading", {}, PagesStillReloading())}},
      {"POST",
       "/v1/sandboxes/{id}/computer/anthropic",
       "computerAnthropic",
       {.body = R"({"action": "screenshot"})"},
       {Answers(200, "a screenshot action"), Bad("a body that is not an object", {.body = "[]"}),
        Bad("an unknown image format", {.query = "?format=gif"}), NotJson(), UnknownSandbox(),
        WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the screen connects",
             [](SpecCodesTest& t) { return t.GoneWhileScreenConnects(); }),
        OverLimit(),
        Refuses(502, "guest_error", "a screen resized during the click",
                {.sandbox = S::kFresh, .body = R"({"action": "left_click", "coordinate": [1, 1]})"},
                ScreenResizesOnInput()),
        Refuses(504, "guest_timeout", "pages still reloading", {}, PagesStillReloading())}},
      {"POST",
       "/v1/sandboxes/{id}/computer/openai",
       "computerOpenAi",
       {.body = R"({"type": "screenshot"})"},
       {Answers(200, "a screenshot action"), Bad("a body that is not an object", {.body = "[]"}),
        Bad("a forward click",
            {.body = R"({"type": "click", "x": 1, "y": 1, "button": "forward"})"}),
        NotJson(), UnknownSandbox(), WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the screen connects",
             [](SpecCodesTest& t) { return t.GoneWhileScreenConnects(); }),
        OverLimit(),
        Refuses(502, "guest_error", "a screen resized during the click",
                {.sandbox = S::kFresh, .body = R"({"type": "click", "x": 1, "y": 1})"},
                ScreenResizesOnInput()),
        Refuses(504, "guest_timeout", "pages still reloading", {}, PagesStillReloading())}},
      {"GET",
       "/v1/sandboxes/{id}/cursor",
       "getCursor",
       {},
       {Answers(200, "the pointer"), Answers(200, "a view token", {.token_scope = "view"}),
        Bad("a display that is not WxH", {.query = "?display=wide"}), UnknownSandbox(),
        WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the screen connects",
             [](SpecCodesTest& t) { return t.GoneWhileScreenConnects(); }),
        Refuses(504, "guest_timeout", "pages still reloading", {}, PagesStillReloading())}},
      {"GET",
       "/v1/sandboxes/{id}/vnc",
       "viewerSocket",
       {.upgrade = true},
       {Answers(101, "an upgrade"),
        Answers(101,
                "a view token as ?token=", {.token_scope = "view", .credential_in_query = true}),
        Runs(101, "", "the view page's cookie",
             [](SpecCodesTest& t) {
               return t.Send(
                   {.no_credential = true,
                    .headers = {{"Cookie", std::string(kViewCookie) + "=" +
                                               t.TokenOf(t.Id(Sandbox::kRunning), "view")}}});
             }),
        Bad("no Upgrade header", {.upgrade = false}), UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "no screen in the guest", {},
                NothingListensOn(slot_network::kGuestRfbPort))}},
      {"GET",
       "/v1/sandboxes/{id}/view",
       "viewerPage",
       {},
       {Answers(200, "the API key"),
        Answers(200,
                "a view token as ?token=", {.token_scope = "view", .credential_in_query = true}),
        Bad("a query parameter given twice", {.query = "?a=1&a=2"}), UnknownSandbox()}},
      {"GET",
       "/v1/sandboxes/{id}/view/novnc/{path}",
       "viewerAsset",
       {.target = "core/rfb.js"},
       {Answers(200, "a module"),
        Runs(200, "", "the view page's cookie",
             [](SpecCodesTest& t) {
               return t.Send(
                   {.no_credential = true,
                    .headers = {{"Cookie", std::string(kViewCookie) + "=" +
                                               t.TokenOf(t.Id(Sandbox::kRunning), "control")}}});
             }),
        Refuses(404, "not_found", "a module noVNC does not have", {.target = "core/nope.js"}),
        Refuses(404, "not_found", "a path outside core/ and vendor/", {.target = "app/ui.js"})}},
      {"GET",
       "/v1/sandboxes/{id}/clipboard",
       "getClipboard",
       {},
       {Answers(200, "the clipboard"), UnknownSandbox(), WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the clipboard is read",
             [](SpecCodesTest& t) { return t.GoneDuringAgentCall(); }),
        Refuses(502, "guest_error", "the agent's channel closing", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.clipboard_error = kChannelClosed; })),
        Refuses(504, "guest_timeout", "the agent not answering", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.clipboard_error = kAgentTimeout; }))}},
      {"PUT",
       "/v1/sandboxes/{id}/clipboard",
       "setClipboard",
       {.body = R"({"text": "hi"})"},
       {Answers(204, "a text"), Bad("a text that is a number", {.body = R"({"text": 5})"}),
        NotJson(), UnknownSandbox(), WhenPaused(),
        Runs(410, "sandbox_gone", "a delete while the clipboard is set",
             [](SpecCodesTest& t) { return t.GoneDuringAgentCall(); }),
        OverLimit(),
        Refuses(502, "guest_error", "the agent's channel closing", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.clipboard_error = kChannelClosed; })),
        Refuses(504, "guest_timeout", "the agent not answering", {.sandbox = S::kFresh},
                WithAgent([](FakeGuestAgent& a) { a.clipboard_error = kAgentTimeout; }))}},
      {"GET",
       "/v1/sandboxes/{id}/egress",
       "getEgress",
       {},
       {Answers(200, "the policy"), Answers(200, "a control token", {.token_scope = "control"}),
        UnknownSandbox()}},
      {"PUT",
       "/v1/sandboxes/{id}/egress",
       "setEgress",
       {.body = R"({"allow": ["example.com"]})"},
       {Answers(200, "a policy"), Bad("allow that is not a list", {.body = R"({"allow": 5})"}),
        NotJson(), UnknownSandbox(), WhenStopped(), OverLimit(), StateDiskFull(),
        StateDiskFailing()}},
      {"GET",
       "/v1/sandboxes/{id}/events",
       "listEvents",
       {},
       {Answers(200, "a page"), Answers(200, "a stopped sandbox's", {.sandbox = S::kStopped}),
        Answers(200, "a view token", {.token_scope = "view"}),
        Answers(200, "a replay token as ?token=",
                {.token_scope = "replay", .credential_in_query = true}),
        Bad("a limit of 0", {.query = "?limit=0"}),
        Bad("an unknown parameter", {.query = "?after=3"}), UnknownSandbox(),
        Runs(500, "internal", "a log file that is not an event log",
             [](SpecCodesTest& t) { return t.CorruptEventLog(); })}},
      {"GET",
       "/v1/sandboxes/{id}/events/head",
       "getEventsHead",
       {},
       {Answers(200, "the API key"), Answers(200, "a view token", {.token_scope = "view"}),
        Answers(200, "a replay token as ?token=",
                {.token_scope = "replay", .credential_in_query = true}),
        Answers(200, "a stopped sandbox's", {.sandbox = S::kStopped}), UnknownSandbox(),
        Runs(500, "event_log_broken", "a log file that is not an event log",
             [](SpecCodesTest& t) { return t.CorruptEventLog(); })}},
      {"GET",
       "/v1/sandboxes/{id}/events/verify",
       "verifyEvents",
       {},
       {Answers(200, "the API key"),
        Answers(200, "a replay token as ?token=",
                {.token_scope = "replay", .credential_in_query = true}),
        Runs(200, "", "a log file that is not an event log: ok false, log_broken",
             [](SpecCodesTest& t) {
               auto r = t.CorruptEventLog();
               auto problems = Body(r).value("problems", json::array());
               EXPECT_FALSE(Body(r).value("ok", true)) << r.body;
               EXPECT_TRUE(!problems.empty() && problems[0].value("kind", "") == "log_broken")
                   << r.body;
               return r;
             }),
        Refuses(403, "forbidden", "a control token", {.token_scope = "control"}),
        Refuses(403, "forbidden", "a cdp token", {.token_scope = "cdp"}), UnknownSandbox()}},
      {"GET",
       "/v1/sandboxes/{id}/recording",
       "getRecording",
       {},
       {Answers(200, "the API key"), Answers(200, "a replay token", {.token_scope = "replay"}),
        Answers(200, "a replay token as ?token=",
                {.token_scope = "replay", .credential_in_query = true}),
        Answers(200, "a stopped sandbox's", {.sandbox = S::kStopped}),
        Refuses(403, "forbidden", "a control token", {.token_scope = "control"}),
        Refuses(403, "forbidden", "a cdp token", {.token_scope = "cdp"}), UnknownSandbox()}},
      {"DELETE",
       "/v1/sandboxes/{id}/recording",
       "deleteRecording",
       {},
       {Answers(204, "a sandbox with nothing recorded", {.sandbox = S::kFresh}),
        Answers(204, "a stopped sandbox", {.sandbox = S::kStopped}),
        Refuses(403, "forbidden", "a replay token", {.token_scope = "replay"}), UnknownSandbox()}},
      {"GET",
       "/v1/sandboxes/{id}/recording.mp4",
       "getRecordingVideo",
       {},
       {Refuses(404, "not_found", "a sandbox with nothing recorded"),
        Refuses(404, "not_found", "a replay token as ?token=, nothing recorded",
                {.token_scope = "replay", .credential_in_query = true}),
        Refuses(403, "forbidden", "a control token", {.token_scope = "control"}),
        Refuses(403, "forbidden", "a cdp token", {.token_scope = "cdp"}), UnknownSandbox()}},
      {"GET",
       "/v1/sandboxes/{id}/recording/segments/{file}",
       "getRecordingSegment",
       {.target = "000000.mp4"},
       {Refuses(404, "not_found", "a segment never recorded"),
        Refuses(404, "not_found", "a name of fewer than 6 digits", {.target = "0.mp4"}),
        Refuses(404, "not_found", "a name with a path in it", {.target = "..%2Fx"}),
        Refuses(404, "not_found", "a name that goes on after .mp4", {.target = "000000.mp4.bak"}),
        Refuses(404, "not_found", "a replay token as ?token=, nothing recorded",
                {.token_scope = "replay", .credential_in_query = true}),
        Refuses(403, "forbidden", "a control token", {.token_scope = "control"}),
        Refuses(403, "forbidden", "a cdp token", {.token_scope = "cdp"}), UnknownSandbox()}},
      {"GET",
       "/v1/sandboxes/{id}/replay",
       "getReplayPage",
       {},
       {Answers(200, "the API key"),
        Answers(200, "a replay token as ?token=",
                {.token_scope = "replay", .credential_in_query = true}),
        Answers(200, "a stopped sandbox's", {.sandbox = S::kStopped}),
        Refuses(403, "forbidden", "a control token", {.token_scope = "control"}),
        Refuses(403, "forbidden", "a cdp token", {.token_scope = "cdp"}), UnknownSandbox()}},
      {"GET",
       "/v1/sandboxes/{id}/cdp",
       "cdpBrowserSocket",
       {},
       {Answers(200, "no upgrade: the version"), Answers(101, "an upgrade", {.upgrade = true}),
        Answers(101, "a cdp token as ?token=",
                {.upgrade = true, .token_scope = "cdp", .credential_in_query = true}),
        UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "no browser in the guest", {.upgrade = true},
                NothingListensOn(slot_network::kGuestCdpPort))}},
      {"GET",
       "/v1/sandboxes/{id}/cdp/json/version",
       "getCdpVersion",
       {},
       {Answers(200, "the version"),
        Answers(200, "a cdp token as ?token=", {.token_scope = "cdp", .credential_in_query = true}),
        UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "no browser in the guest", {},
                NothingListensOn(slot_network::kGuestCdpPort)),
        Refuses(502, "guest_error", "a browser answering what is not JSON", {},
                BrowserBehaves(B::kGarbage))}},
      {"GET",
       "/v1/sandboxes/{id}/cdp/json/list",
       "listCdpTargets",
       {},
       {Answers(200, "the targets"), Answers(200, "a cdp token", {.token_scope = "cdp"}),
        UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "no browser in the guest", {},
                NothingListensOn(slot_network::kGuestCdpPort)),
        Refuses(502, "guest_error", "a browser answering what is not JSON", {},
                BrowserBehaves(B::kGarbage))}},
      {"GET",
       "/v1/sandboxes/{id}/cdp/json",
       "listCdpTargetsShort",
       {},
       {Answers(200, "the targets"), UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "a browser answering what is not JSON", {},
                BrowserBehaves(B::kGarbage))}},
      {"PUT",
       "/v1/sandboxes/{id}/cdp/json/new",
       "newCdpTarget",
       {.query = "?url=about:blank"},
       {Answers(200, "a new tab"), Bad("an unknown parameter", {.query = "?colour=red"}),
        Bad("a url with a line feed", {.query = "?url=a%0Ab"}), UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "a browser answering 500", {}, BrowserBehaves(B::kFailing))}},
      {"GET",
       "/v1/sandboxes/{id}/cdp/json/activate/{target}",
       "activateCdpTarget",
       {.target = kPage},
       {Answers(200, "a target"),
        Refuses(404, "not_found", "a malformed target id", {.target = "not_a_target"}),
        Refuses(404, "not_found", "a target the browser does not have", {.target = "ABCDEF0123"}),
        UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "a browser answering 500", {}, BrowserBehaves(B::kFailing))}},
      {"GET",
       "/v1/sandboxes/{id}/cdp/json/close/{target}",
       "closeCdpTarget",
       {.target = kPage},
       {Refuses(404, "not_found", "a malformed target id", {.target = "not_a_target"}),
        Refuses(404, "not_found", "a target the browser does not have", {.target = "ABCDEF0123"}),
        UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "a browser answering 500", {}, BrowserBehaves(B::kFailing)),
        Answers(200, "a target (last: it closes the page)")}},
      {"GET",
       "/v1/sandboxes/{id}/cdp/devtools/browser/{browser}",
       "cdpBrowserSocketById",
       {.target = kBrowser, .upgrade = true},
       {Answers(101, "an upgrade"), Bad("no Upgrade header", {.upgrade = false}),
        Refuses(404, "not_found", "an id that is not a UUID", {.target = "not-a-uuid"}),
        UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "no browser in the guest", {},
                NothingListensOn(slot_network::kGuestCdpPort))}},
      {"GET",
       "/v1/sandboxes/{id}/cdp/devtools/page/{target}",
       "cdpPageSocket",
       {.target = kPage, .upgrade = true},
       {Answers(101, "an upgrade"), Bad("no Upgrade header", {.upgrade = false}),
        Refuses(404, "not_found", "a malformed target id", {.target = "not_a_target"}),
        UnknownSandbox(), WhenPaused(),
        Refuses(502, "guest_error", "no browser in the guest", {},
                NothingListensOn(slot_network::kGuestCdpPort))}},
      {"POST",
       "/v1/sandboxes/{id}/tokens",
       "createToken",
       {.body = R"({"scope": "view", "ttl_s": 60})"},
       {Answers(201, "a view token"), Answers(201, "a replay token", {.body = R"({"scope": "replay"})"}),
        Bad("an unknown scope", {.body = R"({"scope": "root"})"}),
        Bad("a ttl of 0", {.body = R"({"scope": "view", "ttl_s": 0})"}), NotJson(),
        UnknownSandbox(),
        Refuses(409, "invalid_state", "a view token for a stopped sandbox",
                {.sandbox = S::kStopped}),
        Refuses(409, "invalid_state", "a replay token for a stopped sandbox with nothing recorded",
                {.sandbox = S::kStopped, .body = R"({"scope": "replay"})"}),
        OverLimit(), StateDiskFull(), StateDiskFailing()}},
      {"GET",
       "/v1/sandboxes/{id}/tokens",
       "listTokens",
       {},
       {Answers(200, "the tokens"), UnknownSandbox()}},
      {"DELETE",
       "/v1/tokens/{id}",
       "revokeToken",
       {.id = "tok_0000000000000000"},
       {Runs(204, "", "a live token",
             [](SpecCodesTest& t) {
               auto made = t.harness().Call(verb::post,
                                            "/v1/sandboxes/" + t.Id(Sandbox::kRunning) + "/tokens",
                                            R"({"scope": "view"})");
               return t.Send({.id = Body(made).value("id", "")});
             }),
        Refuses(404, "not_found", "a token that never existed"),
        Runs(507, "insufficient_storage", "a live token, on a full state disk",
             [](SpecCodesTest& t) { return t.RevokeOnStateDisk(false, testing::FullDiskVfs::Mode::kFull); }),
        Runs(500, "internal", "a live token, on a failing state disk",
             [](SpecCodesTest& t) {
               return t.RevokeOnStateDisk(false, testing::FullDiskVfs::Mode::kFailing);
             })}},
      {"POST",
       "/v1/keys",
       "createKey",
       {.body = R"({"name": "ci"})"},
       {Answers(201, "a name"), Bad("no name", {.body = "{}"}),
        Bad("an empty name", {.body = R"({"name": ""})"}), NotJson(), OverLimit(),
        StateDiskFull(), StateDiskFailing()}},
      {"GET", "/v1/keys", "listKeys", {}, {Answers(200, "the keys")}},
      {"DELETE",
       "/v1/keys/{id}",
       "revokeKey",
       {.id = "key_0000000000000000"},
       {Runs(204, "", "another key",
             [](SpecCodesTest& t) {
               auto made = t.harness().Call(verb::post, "/v1/keys", R"({"name": "spare"})");
               return t.Send({.id = Body(made).value("id", "")});
             }),
        Refuses(404, "not_found", "a key that never existed"),
        Runs(409, "last_key", "the only key left",
             [](SpecCodesTest& t) {
               auto keys = Body(t.harness().Call(verb::get, "/v1/keys"))["keys"];
               EXPECT_EQ(keys.size(), 1u);
               return t.Send({.id = keys.empty() ? "" : keys[0].value("id", "")});
             }),
        // Last: the spare keys these make stay.
        Runs(507, "insufficient_storage", "another key, on a full state disk",
             [](SpecCodesTest& t) { return t.RevokeOnStateDisk(true, testing::FullDiskVfs::Mode::kFull); }),
        Runs(500, "internal", "another key, on a failing state disk",
             [](SpecCodesTest& t) {
               return t.RevokeOnStateDisk(true, testing::FullDiskVfs::Mode::kFailing);
             })}},
  };
  return rows;
}

// The 401 and 403 probes of an operation, from what the spec says of its credentials.
std::vector<Case> AuthCases(const SpecOperation& op) {
  std::vector<Case> cases;
  if (op.open) return cases;
  cases.push_back(Refuses(401, "unauthorized", "no credential", {.no_credential = true}));
  if (!op.token_in_query)
    cases.push_back(Refuses(401, "unauthorized", "the API key as ?token=, not taken here",
                            {.credential_in_query = true}));
  if (op.scopes.empty()) {
    cases.push_back(Refuses(403, "forbidden", "a control token on a route for API keys",
                            {.token_scope = "control"}));
    return cases;
  }
  std::string wrong;
  for (const char* s : {"view", "control", "cdp"})
    if (wrong.empty() && std::find(op.scopes.begin(), op.scopes.end(), s) == op.scopes.end())
      wrong = s;
  cases.push_back(Refuses(403, "forbidden", "a " + wrong + " token", {.token_scope = wrong}));
  if (op.token_in_query)
    cases.push_back(Refuses(403, "forbidden", "a " + wrong + " token as ?token=",
                            {.token_scope = wrong, .credential_in_query = true}));
  if (op.path.starts_with("/v1/sandboxes/{id}"))
    cases.push_back(Refuses(403, "forbidden", "a " + op.scopes[0] + " token of another sandbox",
                            {.token_scope = op.scopes[0], .token_of = Sandbox::kOther}));
  return cases;
}

TEST_P(SpecCodesTest, AnswersWhatTheSpecDocuments) {
  const Row& row = GetParam();
  const SpecOperation* op = FindOperation(row.operation);
  ASSERT_NE(op, nullptr) << row.operation << " is not in " << DESKBOX_OPENAPI;
  ASSERT_EQ(op->method + " " + op->path, row.method + " " + row.path);
  std::vector<Case> cases = AuthCases(*op);
  cases.insert(cases.end(), row.cases.begin(), row.cases.end());
  for (const Case& c : cases) {
    SCOPED_TRACE(fmt::format("{} {}, {}", row.method, row.path, c.what));
    ClientResponse r = c.run ? c.run(*this) : Send(c.ask, c.arrange);
    EXPECT_EQ(r.status, c.status) << r.body.substr(0, 400);
    EXPECT_TRUE(op->codes.count(c.status)) << "the spec does not document " << c.status;
    // Every response carries a request id; JSON is never cached.
    EXPECT_TRUE(std::regex_match(r.header("X-Request-Id"), std::regex("req_[0-9a-f]{16}")))
        << r.header("X-Request-Id");
    if (c.status >= 400) {
      EXPECT_TRUE(r.header("Content-Type").starts_with("application/json"))
          << r.header("Content-Type");
      EXPECT_EQ(r.header("Cache-Control"), "no-store");
      EXPECT_EQ(Code(r), c.code) << r.body.substr(0, 400);
      auto message = Body(r)["error"]["message"];
      EXPECT_TRUE(message.is_string() && !message.get<std::string>().empty())
          << r.body.substr(0, 400);
    }
    ResetFaults();
  }
}

INSTANTIATE_TEST_SUITE_P(OpenApi, SpecCodesTest, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& info) {
                           return info.param.operation;
                         });

// ---------------------------------------------------------------------------------------------
// What the rows do not assert, and why.

struct Excepted {
  std::string operation;
  unsigned status;
  std::string reason;
};

// Documented codes that no request can produce against these fakes.
const std::vector<Excepted> kNotHermetic = {
    {"getMetrics", 500, "rendering counters has no failure path"},
    {"listTemplates", 500, "answered from the loaded template manifest; no failure path"},
    {"listSandboxes", 500, "answered from the records in memory; no failure path"},
    {"getSandbox", 500, "answered from the record in memory; no failure path"},
    {"deleteSandbox", 500,
     "a failed destroy goes into the lifecycle event's detail and the delete still answers 204"},
    {"execInSandbox", 500, "every agent failure is answered 502 or 504; no path answers 500"},
    {"writeFile", 500,
     "every agent failure is answered 400, 404, 413, 502 or 504; no path answers 500"},
    {"readFile", 500,
     "every agent failure is answered 400, 404, 413, 502 or 504; no path answers 500"},
    {"getScreenshot", 500,
     "only when PNG/JPEG encoding of a mirrored framebuffer fails, which a valid framebuffer does "
     "not"},
    {"getScreenshot", 502,
     "SPEC: no path answers 502; an absent or broken guest screen is retried until the 20 s wait "
     "for it ends in 504"},
    {"performActions", 500,
     "only when an action fails with the screen still connected: a guest that takes no input for "
     "10 s (typing waits for the writer; DesktopRoutesTest.LongTextWithinTheLimitsReachesAHealthy"
     "Screen shows a healthy screen gets 200)"},
    {"computerAnthropic", 500,
     "only when rendering or encoding a mirrored framebuffer fails; a failed action is a 200 "
     "tool_result with is_error"},
    {"computerOpenAi", 500,
     "only when an action fails with the screen still connected (a guest that takes no input "
     "for 10 s, as for performActions) or encoding a mirrored framebuffer fails"},
    {"viewerSocket", 500, "no path answers 500"},
    {"getClipboard", 500, "every agent failure is answered 502 or 504; no path answers 500"},
    {"setClipboard", 500, "every agent failure is answered 502 or 504; no path answers 500"},
    {"cdpBrowserSocket", 500, "no path answers 500: the browser's failures are 502"},
    {"getCdpVersion", 500, "no path answers 500: the browser's failures are 502"},
    {"listCdpTargets", 500, "no path answers 500: the browser's failures are 502"},
    {"listCdpTargetsShort", 500, "no path answers 500: the browser's failures are 502"},
    {"newCdpTarget", 500, "no path answers 500: the browser's failures are 502"},
    {"activateCdpTarget", 500, "no path answers 500: the browser's failures are 502"},
    {"closeCdpTarget", 500, "no path answers 500: the browser's failures are 502"},
    {"cdpBrowserSocketById", 500, "no path answers 500: the browser's failures are 502"},
    {"cdpPageSocket", 500, "no path answers 500: the browser's failures are 502"},
    {"listTokens", 500, "answered from the tokens in memory; no failure path"},
    {"listKeys", 500, "answered from the keys in memory; no failure path"},
    {"getRecordingSegment", 500,
     "only when opening a segment file fails just after stat() found it (removed in between, or "
     "unreadable: these tests run as root, who reads every file)"},
};

struct Elsewhere {
  std::string operation;
  unsigned status;
  std::string test;  // Suite.Name in this binary
};

// Documented codes asserted by a test of their own.
const std::vector<Elsewhere> kProvenIn = {
    {"viewerSocket", 429, "DesktopRoutesTest.ASandboxTakesAtMost32Viewers"},
    {"cdpBrowserSocket", 429, "CdpRoutesTest.ASandboxTakesAtMost32CdpSessions"},
    {"cdpBrowserSocketById", 429, "CdpRoutesTest.ASandboxTakesAtMost32CdpSessions"},
    {"cdpPageSocket", 429, "CdpRoutesTest.ASandboxTakesAtMost32CdpSessions"},
    {"getEgress", 500, "SpecStoredStateTest.AStoredEgressPolicyThatDoesNotParseIs500"},
    {"viewerAsset", 500, "SpecFindingsTest.AssetsWithoutNoVncAre500Internal"},
    {"getRecordingVideo", 200, "RecordingRoutesTest.TheJoinedRecordingIsOneMp4"},
    {"getRecordingVideo", 206, "RecordingRoutesTest.TheJoinedRecordingIsOneMp4"},
    {"getRecordingVideo", 304, "RecordingRoutesTest.TheCurrentETagIs304"},
    {"getRecordingVideo", 416, "RecordingRoutesTest.ARangePastTheEndIs416"},
    {"getRecordingVideo", 500, "RecordingRoutesTest.ASegmentThatIsNotAnMp4Is500ForTheJoinedVideo"},
    {"getRecordingSegment", 200, "RecordingRoutesTest.ListsAPlantedSegmentAndServesItWhole"},
    {"getRecordingSegment", 206, "RecordingRoutesTest.ServesARangeOfASegment"},
    {"getRecordingSegment", 304, "RecordingRoutesTest.TheCurrentETagIs304"},
    {"getRecordingSegment", 416, "RecordingRoutesTest.ARangePastTheEndIs416"},
};

// Where deskboxd answers otherwise than the spec: each a DISABLED_ test written to the spec.
// None today: deskboxd answers every documented code as the spec says.
const std::vector<Elsewhere> kSpecFindings = {};

// Codes every operation documents, each asserted for all of them by one test.
const std::vector<std::pair<unsigned, std::string>> kEveryOperation = {
    {400, "SpecFindingsTest.EveryOperationAnswersAQueryStringThatDoesNotParse400"},
};

bool TestExists(const std::string& full_name) {
  auto* unit = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    const auto* suite = unit->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j)
      if (std::string(suite->name()) + "." + suite->GetTestInfo(j)->name() == full_name)
        return true;
  }
  return false;
}

TEST(SpecTableTest, TheSpecFileIsReadWhole) {
  ASSERT_EQ(Spec().size(), 48u) << DESKBOX_OPENAPI;
  for (const auto& op : Spec()) {
    EXPECT_FALSE(op.id.empty()) << op.method << " " << op.path;
    EXPECT_GE(op.codes.size(), op.open ? 1u : 3u) << op.id;
  }
  const SpecOperation* exec = FindOperation("execInSandbox");
  ASSERT_NE(exec, nullptr);
  EXPECT_EQ(exec->scopes, std::vector<std::string>{"control"});
  EXPECT_EQ(exec->codes,
            (std::set<unsigned>{200, 400, 401, 403, 404, 409, 410, 413, 500, 502, 504}));
  EXPECT_TRUE(FindOperation("getHealth")->open);
  EXPECT_TRUE(FindOperation("cdpPageSocket")->token_in_query);
  const SpecOperation* video = FindOperation("getRecordingVideo");
  ASSERT_NE(video, nullptr);
  EXPECT_EQ(video->scopes, std::vector<std::string>{"replay"});
  EXPECT_TRUE(video->token_in_query);
  EXPECT_EQ(video->codes,
            (std::set<unsigned>{200, 206, 304, 400, 401, 403, 404, 416, 500}));
  EXPECT_EQ(FindOperation("listEvents")->scopes,
            (std::vector<std::string>{"view", "control", "replay"}));
}

TEST(SpecTableTest, EveryOperationOfTheSpecHasARowAndEveryRowAnOperation) {
  std::set<std::string> spec, table;
  for (const auto& op : Spec()) spec.insert(op.method + " " + op.path + " " + op.id);
  for (const auto& row : Rows())
    EXPECT_TRUE(table.insert(row.method + " " + row.path + " " + row.operation).second);
  for (const auto& s : spec) EXPECT_TRUE(table.count(s)) << "no row for " << s;
  for (const auto& t : table) EXPECT_TRUE(spec.count(t)) << "not in the spec: " << t;
}

TEST(SpecTableTest, EveryDocumentedCodeIsAssertedProvenElsewhereOrExcepted) {
  for (const auto& e : kProvenIn) EXPECT_TRUE(TestExists(e.test)) << e.test;
  for (const auto& e : kSpecFindings) EXPECT_TRUE(TestExists(e.test)) << e.test;
  for (const auto& [code, test] : kEveryOperation) EXPECT_TRUE(TestExists(test)) << test;
  for (const auto& op : Spec()) {
    std::set<unsigned> asserted;
    for (const auto& row : Rows())
      if (row.operation == op.id)
        for (const auto& c : row.cases) asserted.insert(c.status);
    if (!op.open) asserted.insert({401, 403});
    for (unsigned code : op.codes) {
      int ways = asserted.count(code);
      auto named = [&](const auto& list) {
        return std::count_if(list.begin(), list.end(), [&](const auto& e) {
          return e.operation == op.id && e.status == code;
        });
      };
      ways += named(kProvenIn) + named(kNotHermetic);
      if (!ways)
        ways += std::count_if(kEveryOperation.begin(), kEveryOperation.end(),
                              [&](const auto& e) { return e.first == code; });
      if (!ways) ways += named(kSpecFindings);
      EXPECT_EQ(ways, 1) << op.id << " " << code
                         << (ways ? " is asserted and also listed elsewhere"
                                  : " is neither asserted, proven elsewhere nor excepted");
    }
  }
}

TEST(SpecTableTest, DeskboxdServesExactlyTheSpecsOperations) {
  ServiceHarness h("SpecTableTest-routes");
  h.Start();
  auto shape = [](const std::string& method, const std::string& path) {
    return method + " " + std::regex_replace(path, std::regex(R"(\{[^}]*\})"), "{}");
  };
  std::set<std::string> served, spec;
  for (const auto& r : h.service().router().routes())
    served.insert(shape(std::string(boost::beast::http::to_string(r.method)), r.pattern));
  for (const auto& op : Spec()) spec.insert(shape(op.method, op.path));
  EXPECT_EQ(served, spec);
}

// ---------------------------------------------------------------------------------------------
// Codes that need state made before deskboxd starts.

TEST(SpecStoredStateTest, AStoredEgressPolicyThatDoesNotParseIs500) {
  ServiceHarness h("SpecStoredStateTest-egress");
  SandboxRecord r;
  r.id = "sb-00000000000000e1";
  r.state = vmhost::SandboxState::kRunning;
  r.template_name = "desktop@test";
  r.timeout_s = 600;
  r.created_at_ms = h.clock().NowMs();
  r.egress_json = "{not json";
  ASSERT_TRUE(h.store().PutSandbox(r));
  h.host().adopt = {r.id};
  h.Start();
  auto res = h.Call(verb::get, "/v1/sandboxes/" + r.id + "/egress");
  EXPECT_EQ(res.status, 500u) << res.body;
  EXPECT_EQ(Code(res), "internal");
}

}  // namespace
}  // namespace deskbox::api::spec_codes
