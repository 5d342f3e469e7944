#pragma once
// The fixture and the vocabulary of the table in spec_codes_test.cc: a row per operation of the
// spec, each a list of cases (a request, what it must be answered), and SpecCodesTest, which
// sends them to the whole API on fakes, makes the sandboxes they name, scripts the fakes' faults
// and undoes them after each case.
#include <gtest/gtest.h>

#include <boost/asio/write.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>

#include "full_disk_vfs.h"
#include "guest_services_fixture.h"

namespace deskbox::api::spec_codes {

using testing::FakeDevTools;
using testing::FakeRfbServer;
using vmhost::AgentError;
using vmhost::ExecResult;
using vmhost::VmError;
using vmhost::testing::FakeGuestAgent;

inline const std::string kPage = FakeDevTools::kFirstPage;
inline const std::string kBrowser = FakeDevTools::kBrowserId;
inline const std::string kNoSandbox = "sb-00000000000000ff";

// Which sandbox a request names. kFresh: a new running one for this request alone (its fakes
// may be scripted without disturbing the others); kFreshPaused: a new paused one.
enum class Sandbox { kRunning, kPaused, kStopped, kOther, kFresh, kFreshPaused, kUnknown };

// A request to the operation under test, as it differs from the row's own request.
struct Ask {
  std::optional<Sandbox> sandbox;     // whose id {id} is (default: the running sandbox)
  std::optional<std::string> id;      // {id} as given (a token or key id, or a sandbox's)
  std::optional<std::string> target;  // {target}, {browser}, {path} or {file}
  std::optional<std::string> query;   // "?…"
  std::optional<std::string> body;
  std::optional<bool> upgrade;  // with WebSocket upgrade headers
  // The credential: the API key in the Authorization header, unless said otherwise.
  bool no_credential = false;
  std::string token_scope;           // a token of this scope instead,
  std::optional<Sandbox> token_of;   // for this sandbox (default: the one the request names),
  bool credential_in_query = false;  // given as ?token= instead of the header
  std::map<std::string, std::string> headers;
};

class SpecCodesTest;
// Scripts the fakes before a case's request; `id` is the sandbox the request names.
using Arrange = std::function<void(SpecCodesTest&, const std::string& id)>;

struct Case {
  unsigned status;
  std::string code;  // the error's code; "" for a success
  std::string what;  // the request, in words
  Ask ask;
  Arrange arrange;
  // A case of more than one request (410s, revocations): makes them, returns the answer.
  std::function<ClientResponse(SpecCodesTest&)> run;
};

struct Row {
  std::string method, path, operation;  // as openapi.yaml has them
  Ask request;                          // a request the operation takes
  std::vector<Case> cases;
};
inline void PrintTo(const Row& row, std::ostream* os) {
  *os << row.operation;
}

inline Case Answers(unsigned status, std::string what, Ask ask = {}, Arrange arrange = {}) {
  return {status, "", std::move(what), std::move(ask), std::move(arrange), {}};
}
inline Case Refuses(unsigned status, std::string code, std::string what, Ask ask = {},
                    Arrange arrange = {}) {
  return {status, std::move(code), std::move(what), std::move(ask), std::move(arrange), {}};
}
inline Case Runs(unsigned status, std::string code, std::string what,
                 std::function<ClientResponse(SpecCodesTest&)> run) {
  return {status, std::move(code), std::move(what), {}, {}, std::move(run)};
}
inline Case Bad(std::string what, Ask ask) {
  return Refuses(400, "invalid_request", std::move(what), std::move(ask));
}
inline Case NotJson() {
  return Refuses(400, "invalid_json", "a body that is not JSON", {.body = "{"});
}
inline Case OverLimit() {
  return Refuses(413, "payload_too_large", "a body over 1 MiB",
                 {.body = std::string(kMaxJsonBody + 1, ' ')});
}
inline Case UnknownSandbox() {
  return Refuses(404, "not_found", "a sandbox that does not exist", {.sandbox = Sandbox::kUnknown});
}
inline Case WhenPaused() {
  return Refuses(409, "invalid_state", "a paused sandbox", {.sandbox = Sandbox::kPaused});
}
inline Case WhenStopped() {
  return Refuses(409, "invalid_state", "a stopped sandbox", {.sandbox = Sandbox::kStopped});
}

class SpecCodesTest : public GuestServicesTest, public ::testing::WithParamInterface<Row> {
 public:
  // Recording stays off (ServiceHarness): what a sandbox would have recorded by the time of a
  // request depends on timing. recording_routes_test.cc plants recordings for the codes that
  // need one.
  SpecCodesTest() : GuestServicesTest([](DaemonConfig& c) { c.novnc_dir = NoVncDir(); }) {}

  // A noVNC install of one module, for the view page's assets.
  static std::string NoVncDir() {
    return (std::filesystem::temp_directory_path() /
            ("deskbox-novnc-" + std::to_string(::getpid())))
        .string();
  }
  static void SetUpTestSuite() {
    testing::FullDiskVfs::Install();  // before the harness opens its store: StateDisk() faults
    std::filesystem::create_directories(NoVncDir() + "/core");
    std::ofstream(NoVncDir() + "/core/rfb.js") << "export default class RFB {}\n";
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(NoVncDir()); }
  void TearDown() override {
    for (const auto& id : made_)
      EXPECT_TRUE(WaitNotInUse(id)) << id << " still has live connections";
  }

  // For the cases' functions.
  using GuestServicesTest::OnAgent;
  using GuestServicesTest::OnHost;
  ServiceHarness& harness() { return h_; }
  FakeRfbServer& screen() { return rfb; }
  FakeDevTools& browser() { return devtools; }

  // The sandbox's id; the shared ones are made when first asked for.
  std::string Id(Sandbox s) {
    if (s == Sandbox::kUnknown) return kNoSandbox;
    if (s != Sandbox::kFresh && s != Sandbox::kFreshPaused && ids_.count(s)) return ids_[s];
    std::string id = Create();
    made_.push_back(id);
    if (s == Sandbox::kPaused || s == Sandbox::kFreshPaused) {
      EXPECT_EQ(h_.Call(verb::post, "/v1/sandboxes/" + id + "/pause").status, 200u);
    }
    if (s == Sandbox::kStopped) {
      EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + id).status, 204u);
    }
    if (s != Sandbox::kFresh && s != Sandbox::kFreshPaused) ids_[s] = id;
    return id;
  }
  std::string TokenOf(const std::string& id, const std::string& scope) {
    auto& t = tokens_[{id, scope}];
    if (t.empty()) t = Token(id, scope);
    return t;
  }

  // A request ready to send (from any thread), and the sandbox id it names.
  struct Prepared {
    verb method;
    std::string target, bearer, body, id;
    std::map<std::string, std::string> headers;
  };
  Prepared Prepare(const Ask& ask) {
    const Ask& base = GetParam().request;
    Prepared p;
    p.method = boost::beast::http::string_to_verb(GetParam().method);
    std::string path = GetParam().path;
    bool names_sandbox = path.starts_with("/v1/sandboxes/{id}");
    p.id = ask.id    ? *ask.id
           : base.id ? *base.id
           : path.find("{id}") != std::string::npos
               ? Id(ask.sandbox.value_or(base.sandbox.value_or(Sandbox::kRunning)))
               : "";
    std::string target = ask.target.value_or(base.target.value_or(""));
    for (const std::string name : {"{id}", "{target}", "{browser}", "{path}", "{file}"})
      if (auto at = path.find(name); at != std::string::npos)
        path.replace(at, name.size(), name == "{id}" ? p.id : target);
    std::string query = ask.query.value_or(base.query.value_or(""));
    p.body = ask.body.value_or(base.body.value_or(""));
    p.headers = ask.headers;
    if (ask.upgrade.value_or(base.upgrade.value_or(false))) {
      p.headers["Upgrade"] = "websocket";
      p.headers["Connection"] = "Upgrade";
      p.headers["Sec-WebSocket-Key"] = "dGhlIHNhbXBsZSBub25jZQ==";
      p.headers["Sec-WebSocket-Version"] = "13";
    }
    std::string secret = h_.key();
    if (!ask.token_scope.empty())
      secret = TokenOf(ask.token_of    ? Id(*ask.token_of)
                       : names_sandbox ? p.id
                                       : Id(Sandbox::kRunning),
                       ask.token_scope);
    if (ask.no_credential) secret.clear();
    if (ask.credential_in_query) {
      query += (query.empty() ? "?token=" : "&token=") + secret;
      secret.clear();
    }
    p.target = path + query;
    p.bearer = secret;
    return p;
  }
  ClientResponse Perform(const Prepared& p) {
    return h_.Send(p.method, p.target, p.bearer, p.headers, p.body);
  }
  ClientResponse Send(const Ask& ask, const Arrange& arrange = {}) {
    auto p = Prepare(ask);
    if (arrange) arrange(*this, p.id);
    return Perform(p);
  }

  static bool Poll(const std::function<bool()>& done) {
    for (int i = 0; i < 1000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }

  // The request, on a new sandbox, with the guest agent holding it in flight while the sandbox
  // is deleted: a delete does not wait for guest operations, which then end with 410.
  ClientResponse GoneDuringAgentCall() {
    auto p = Prepare({.sandbox = Sandbox::kFresh});
    OnAgent(p.id, [](FakeGuestAgent& a) { a.hold = true; });
    auto reply = std::async(std::launch::async, [&] { return Perform(p); });
    EXPECT_TRUE(
        Poll([&] { return OnAgent(p.id, [](FakeGuestAgent& a) { return a.held(); }) > 0; }));
    EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + p.id).status, 204u);
    OnAgent(p.id, [](FakeGuestAgent& a) { a.Release(); });
    return reply.get();
  }
  // The request, on a new sandbox whose screen accepts the connection and never greets: the
  // call waits for the screen while the sandbox is deleted.
  ClientResponse GoneWhileScreenConnects() {
    rfb.SetBehaviour(FakeRfbServer::Behaviour::kSilent);
    auto p = Prepare({.sandbox = Sandbox::kFresh});
    size_t before = rfb.connections();
    auto reply = std::async(std::launch::async, [&] { return Perform(p); });
    EXPECT_TRUE(rfb.WaitFor([&] { return rfb.connections() > before; }));
    EXPECT_EQ(h_.Call(verb::delete_, "/v1/sandboxes/" + p.id).status, 204u);
    return reply.get();
  }
  // A pause (or resume) held in flight by vmhost while the sandbox is deleted: it finishes,
  // then answers 410; the delete waits for it.
  ClientResponse GoneDuringLifecycleCall(bool resume) {
    std::string id = Id(resume ? Sandbox::kFreshPaused : Sandbox::kFresh);
    OnHost([&](FakeSandboxHost& host) {
      (resume ? host.hold_next_resume : host.hold_next_pause) = true;
    });
    auto reply = std::async(std::launch::async, [&] {
      return h_.Call(verb::post, "/v1/sandboxes/" + id + (resume ? "/resume" : "/pause"));
    });
    EXPECT_TRUE(Poll([&] { return OnHost([](FakeSandboxHost& host) { return host.holding(); }); }));
    auto deleted = std::async(std::launch::async,
                              [&] { return h_.Call(verb::delete_, "/v1/sandboxes/" + id); });
    // The delete has begun once new guest operations are refused as gone.
    EXPECT_TRUE(Poll(
        [&] { return h_.Call(verb::get, "/v1/sandboxes/" + id + "/clipboard").status == 410; }));
    OnHost([](FakeSandboxHost& host) { host.ReleaseHeld(); });
    EXPECT_EQ(deleted.get().status, 204u);
    return reply.get();
  }
  // An upload whose Content-Length is over 1 GiB: refused before any byte of it is read.
  ClientResponse FileOverLimit() {
    namespace http = boost::beast::http;
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket sock(io);
    sock.connect({boost::asio::ip::make_address("127.0.0.1"), h_.port()});
    std::string head = fmt::format(
        "PUT /v1/sandboxes/{}/files?path=/tmp/big HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Authorization: Bearer {}\r\nContent-Length: {}\r\n\r\n",
        Id(Sandbox::kRunning), h_.key(), (uint64_t{1} << 30) + 1);  // the spec's 1 GiB, and a byte
    boost::asio::write(sock, boost::asio::buffer(head));
    // deskboxd reads (and drops) up to 64 KiB of a body it refused before it answers; this
    // client then stops sending.
    boost::asio::write(sock, boost::asio::buffer(std::string(64 << 10, 'x')));
    sock.shutdown(boost::asio::ip::tcp::socket::shutdown_send);
    boost::beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(sock, buf, res);
    ClientResponse out{res.result_int(), res.body(), {}};
    for (const auto& f : res) out.headers[std::string(f.name_string())] = std::string(f.value());
    return out;
  }
  // Revoking a token (or key) made for it, with the state disk in `mode` once it is made.
  ClientResponse RevokeOnStateDisk(bool key, testing::FullDiskVfs::Mode mode) {
    auto made = key ? h_.Call(verb::post, "/v1/keys", R"({"name": "spare"})")
                    : h_.Call(verb::post, "/v1/sandboxes/" + Id(Sandbox::kRunning) + "/tokens",
                              R"({"scope": "view"})");
    testing::FullDiskVfs::Set(mode);
    return Send({.id = Body(made).value("id", "")});
  }
  // The request, on a new sandbox whose event log file was overwritten with what is not a log.
  ClientResponse CorruptEventLog() {
    std::string id = Id(Sandbox::kFresh);
    EXPECT_EQ(h_.Call(verb::get, "/v1/sandboxes/" + id + "/events").status, 200u);  // on disk now
    std::fstream(h_.events().LogPath(id), std::ios::in | std::ios::out | std::ios::binary)
        .write("NOTALOG!", 8);
    return Send({.id = id});
  }

  // Every fault a case scripted is undone before the next.
  void ResetFaults() {
    testing::FullDiskVfs::Set(testing::FullDiskVfs::Mode::kWorking);
    ConnectGuestServices();
    OnHost([](FakeSandboxHost& host) {
      host.fail_connect.reset();
      host.fail_browser_fresh.reset();
      host.fail_next_create.reset();
      host.fail_next_pause.reset();
      host.fail_next_resume.reset();
      host.hold_next_pause = host.hold_next_resume = false;
    });
    rfb.Reset();
    devtools.SetBehaviour(FakeDevTools::Behaviour::kNormal);
  }

 private:
  std::map<Sandbox, std::string> ids_;
  std::map<std::pair<std::string, std::string>, std::string> tokens_;
  std::vector<std::string> made_;
};

// ---- Scripted faults ----

inline Arrange FailCreate(VmError::Code code) {
  return [code](SpecCodesTest& t, const std::string&) {
    t.OnHost([code](FakeSandboxHost& h) {
      h.fail_next_create = VmError{code, "failed on purpose"};
    });
  };
}
// The state database's disk full (SQLITE_FULL, as from ENOSPC) or failing (an I/O error).
inline Arrange StateDisk(testing::FullDiskVfs::Mode mode) {
  return [mode](SpecCodesTest&, const std::string&) { testing::FullDiskVfs::Set(mode); };
}
inline Case StateDiskFull() {
  return Refuses(507, "insufficient_storage", "a full state disk", {},
                 StateDisk(testing::FullDiskVfs::Mode::kFull));
}
inline Case StateDiskFailing() {
  return Refuses(500, "internal", "a failing state disk", {},
                 StateDisk(testing::FullDiskVfs::Mode::kFailing));
}
inline Arrange FailPause(VmError::Code code) {
  return [code](SpecCodesTest& t, const std::string&) {
    t.OnHost([code](FakeSandboxHost& h) {
      h.fail_next_pause = VmError{code, "QMP stop failed on purpose"};
    });
  };
}
inline Arrange FailResume(VmError::Code code) {
  return [code](SpecCodesTest& t, const std::string&) {
    t.OnHost([code](FakeSandboxHost& h) {
      h.fail_next_resume = VmError{code, "QMP cont failed on purpose"};
    });
  };
}
inline Arrange WithAgent(std::function<void(FakeGuestAgent&)> script) {
  return [script](SpecCodesTest& t, const std::string& id) { t.OnAgent(id, script); };
}
inline Arrange ExecFails(AgentError e) {
  return WithAgent([e](FakeGuestAgent& a) {
    a.on_exec = [e](const vmhost::ExecSpec&) -> std::expected<ExecResult, AgentError> {
      return std::unexpected(e);
    };
  });
}
inline Arrange PagesStillReloading() {
  return [](SpecCodesTest& t, const std::string&) {
    t.OnHost([](FakeSandboxHost& h) {
      h.fail_browser_fresh = VmError{VmError::Code::kTimeout, "the pages did not reload in time"};
    });
  };
}
inline Arrange NothingListensOn(uint16_t guest_port) {
  return [guest_port](SpecCodesTest& t, const std::string&) {
    t.OnHost([guest_port](FakeSandboxHost& h) { h.guest_ports.erase(guest_port); });
  };
}
inline Arrange BrowserBehaves(FakeDevTools::Behaviour b) {
  return [b](SpecCodesTest& t, const std::string&) { t.browser().SetBehaviour(b); };
}
inline Arrange ScreenResizesOnInput() {
  return [](SpecCodesTest& t, const std::string&) { t.screen().ResizeOnNextInput(80, 50); };
}

inline const AgentError kChannelClosed{AgentError::Code::kClosed, "the agent channel closed"};
inline const AgentError kAgentTimeout{AgentError::Code::kTimeout,
                                      "no answer from the agent in time"};

}  // namespace deskbox::api::spec_codes
