// Restorer against scripted peers on socketpairs (no QEMU, no guest): the QMP commands of a
// restore in their order, QEMU's refusals and a load that fails or never ends, an agent that
// drops requests while it reopens its port, and one that refuses.
#include "vmhost/restorer.h"

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <algorithm>
#include <functional>
#include <map>
#include <optional>

#include "desktop_images/agent_frame.h"

namespace deskbox::vmhost {
namespace {
namespace asio = boost::asio;
using nlohmann::json;
using namespace std::chrono_literals;
using Socket = asio::local::stream_protocol::socket;

// A QEMU's QMP side: the greeting, then each command answered by `on_command` with the replies
// and events to send (in order); an empty list answers nothing.
struct FakeQmp {
  std::function<std::vector<json>(const json& command)> on_command;
  std::vector<std::string> commands;  // the commands received after the handshake
  std::vector<json> arguments;

  asio::awaitable<void> Serve(Socket& s) {
    asio::streambuf buf;
    auto write = [&](const json& j) -> asio::awaitable<void> {
      std::string line = j.dump() + "\r\n";
      co_await asio::async_write(s, asio::buffer(line), asio::use_awaitable);
    };
    json greeting = {{"QMP", {{"version", json::object()}, {"capabilities", json::array()}}}};
    co_await write(greeting);
    for (;;) {
      boost::system::error_code ec;
      co_await asio::async_read_until(s, buf, '\n', asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      std::istream is(&buf);
      std::string line;
      std::getline(is, line);
      json cmd = json::parse(line);
      std::string name = cmd.value("execute", "");
      if (name == "qmp_capabilities") {
        json ok = {{"return", json::object()}, {"id", cmd["id"]}};
        co_await write(ok);
        continue;
      }
      commands.push_back(name);
      arguments.push_back(cmd.value("arguments", json::object()));
      for (json reply : on_command(cmd)) {
        if (!reply.contains("event")) reply["id"] = cmd["id"];
        co_await write(reply);
      }
    }
  }
};

json Ok() { return {{"return", json::object()}}; }
json Migration(const std::string& status) { return {{"event", "MIGRATION"}, {"data", {{"status", status}}}}; }

// A QEMU that restores as asked: the load completes as soon as it starts.
std::vector<json> RestoringQemu(const json& cmd) {
  if (cmd["execute"] == "migrate-incoming") return {Ok(), Migration("setup"), Migration("completed")};
  return {Ok()};
}

// The guest agent's side: `on_request` answers each request (nullopt: dropped unanswered).
struct FakeAgent {
  std::function<std::optional<agent::v1::Response>(const agent::v1::Request&)> on_request;
  std::vector<agent::v1::Request::KindCase> requests;

  asio::awaitable<void> Serve(Socket& s) {
    desktop_images::FrameReader reader;
    char buf[4096];
    for (;;) {
      boost::system::error_code ec;
      size_t n = co_await s.async_read_some(asio::buffer(buf), asio::redirect_error(asio::use_awaitable, ec));
      if (ec) co_return;
      std::string_view bytes(buf, n);
      while (!bytes.empty()) {
        bytes.remove_prefix(reader.Feed(bytes));
        auto payload = reader.Next();
        if (!payload) co_return;
        if (!*payload) continue;
        auto req = desktop_images::ParseRequest(**payload);
        if (!req) co_return;
        requests.push_back(req->kind_case());
        auto resp = on_request(*req);
        if (!resp) continue;
        resp->set_id(req->id());
        std::string frame = *desktop_images::EncodeFrame(*resp);
        co_await asio::async_write(s, asio::buffer(frame), asio::use_awaitable);
      }
    }
  }
};

std::optional<agent::v1::Response> Answer(const agent::v1::Request& r) {
  agent::v1::Response resp;
  if (r.has_ping()) resp.mutable_pong()->set_protocol_version(1);
  else resp.mutable_ack();
  return resp;
}

struct Rig {
  asio::io_context io;
  Socket qmp_peer{io}, agent_peer{io};
  std::unique_ptr<QmpClient> qmp;
  std::unique_ptr<AgentClient> agent;
  FakeQmp fake_qmp{RestoringQemu};
  FakeAgent fake_agent{Answer};
  RestoreSettings settings{.state_file = "/cache/templates/t/state",
                           .restore_timeout = 2s,
                           .ready_timeout = 2s,
                           .ping_try = 100ms,
                           .hand_out_try = 300ms,
                           .hand_out_ping = 1s};

  Rig() {
    Socket a(io), b(io);
    asio::local::connect_pair(a, qmp_peer);
    asio::local::connect_pair(b, agent_peer);
    qmp = std::make_unique<QmpClient>(std::move(a));
    agent = std::make_unique<AgentClient>(std::move(b));
  }
  // Runs `f` with both peers serving; returns its result.
  std::expected<void, VmError> Run(std::function<asio::awaitable<std::expected<void, VmError>>(Restorer&)> f) {
    Restorer restorer(settings);
    asio::co_spawn(io, fake_qmp.Serve(qmp_peer), asio::detached);
    asio::co_spawn(io, fake_agent.Serve(agent_peer), asio::detached);
    std::optional<std::expected<void, VmError>> result;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      auto hs = co_await qmp->Handshake(2s);
      if (!hs) {
        result = std::unexpected(VmError{VmError::Code::kQemu, "handshake: " + hs.error().message});
      } else {
        result = co_await f(restorer);
      }
      qmp->Close();
      agent->Close();
      io.stop();
    }, asio::detached);
    io.run_for(20s);
    if (!result) return std::unexpected(VmError{VmError::Code::kTimeout, "the test did not finish"});
    return *result;
  }
  std::expected<void, VmError> Restore() {
    return Run([&](Restorer& r) { return r.Restore(*qmp, *agent); });
  }
  std::expected<void, VmError> HandOut() {
    return Run([&](Restorer& r) { return r.HandOut(*agent, 7); });
  }
};

using Kind = agent::v1::Request::KindCase;

TEST(Restorer, LoadsTheStateFileRunsTheGuestAndWaitsForItsAgent) {
  Rig rig;
  auto r = rig.Restore();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(rig.fake_qmp.commands, (std::vector<std::string>{"migrate-set-capabilities", "migrate-incoming", "cont"}));
  // MIGRATION events say when the load is done; guest RAM comes from the shared template file,
  // not the stream.
  std::map<std::string, json> caps;
  for (const auto& c : rig.fake_qmp.arguments[0]["capabilities"]) caps[c["capability"]] = c["state"];
  EXPECT_EQ(caps, (std::map<std::string, json>{{"events", true}, {"x-ignore-shared", true}}));
  EXPECT_EQ(rig.fake_qmp.arguments[1]["uri"], "file:/cache/templates/t/state");
  EXPECT_EQ(rig.fake_agent.requests, (std::vector<Kind>{Kind::kPing}));
}

TEST(Restorer, AFailedLoadIsReportedWithQemusReasonAndTheGuestIsNotRun) {
  Rig rig;
  rig.fake_qmp.on_command = [](const json& cmd) -> std::vector<json> {
    if (cmd["execute"] == "migrate-incoming") return {Ok(), Migration("failed")};
    if (cmd["execute"] == "query-migrate")
      return {{{"return", {{"status", "failed"}, {"error-desc", "load of migration failed: Invalid argument"}}}}};
    return {Ok()};
  };
  auto r = rig.Restore();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, VmError::Code::kQemu);
  EXPECT_EQ(r.error().message, "restore failed: load of migration failed: Invalid argument");
  EXPECT_EQ(rig.fake_qmp.commands,
            (std::vector<std::string>{"migrate-set-capabilities", "migrate-incoming", "query-migrate"}));
  EXPECT_TRUE(rig.fake_agent.requests.empty());
}

TEST(Restorer, ALoadThatNeverEndsTimesOut) {
  Rig rig;
  rig.settings.restore_timeout = 300ms;
  rig.fake_qmp.on_command = [](const json& cmd) -> std::vector<json> {
    if (cmd["execute"] == "migrate-incoming") return {Ok(), Migration("active")};
    return {Ok()};
  };
  auto r = rig.Restore();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, VmError::Code::kQemu);
  EXPECT_TRUE(r.error().message.starts_with("restore did not complete: ")) << r.error().message;
  EXPECT_EQ(rig.fake_qmp.commands, (std::vector<std::string>{"migrate-set-capabilities", "migrate-incoming"}));
}

TEST(Restorer, ACommandQemuRefusesIsNamed) {
  Rig rig;
  rig.fake_qmp.on_command = [](const json& cmd) -> std::vector<json> {
    if (cmd["execute"] == "migrate-incoming")
      return {{{"error", {{"class", "GenericError"}, {"desc", "The incoming migration has already been started"}}}}};
    return {Ok()};
  };
  auto r = rig.Restore();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, VmError::Code::kQemu);
  EXPECT_TRUE(r.error().message.starts_with("migrate-incoming: ")) << r.error().message;
  EXPECT_NE(r.error().message.find("already been started"), std::string::npos) << r.error().message;
}

TEST(Restorer, PingsAgainWhileTheRestoredAgentReopensItsPort) {
  Rig rig;
  int pings = 0;
  rig.fake_agent.on_request = [&](const agent::v1::Request& r) -> std::optional<agent::v1::Response> {
    if (r.has_ping() && ++pings <= 3) return std::nullopt;  // lost while the port reopened
    return Answer(r);
  };
  auto r = rig.Restore();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(pings, 4);
}

TEST(Restorer, AnAgentThatNeverAnswersFailsTheRestoreAfterReadyTimeout) {
  Rig rig;
  rig.settings.ready_timeout = 500ms;
  rig.fake_agent.on_request = [](const agent::v1::Request&) { return std::optional<agent::v1::Response>(); };
  auto t0 = std::chrono::steady_clock::now();
  auto r = rig.Restore();
  auto took = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, VmError::Code::kAgent);
  EXPECT_TRUE(r.error().message.starts_with("guest agent: ")) << r.error().message;
  EXPECT_GE(took, 500ms);
  EXPECT_GE(rig.fake_agent.requests.size(), 4u);  // short tries, not one long one
}

TEST(Restorer, HandOutSetsTheClockAndReseedsBothAtOnce) {
  Rig rig;
  // Holds the first request until the second has arrived: both must be in flight together.
  std::optional<agent::v1::Request> held;
  rig.fake_agent.on_request = [&](const agent::v1::Request& r) -> std::optional<agent::v1::Response> {
    if (!held) {
      held = r;
      return std::nullopt;
    }
    return Answer(r);
  };
  rig.settings.hand_out_try = 300ms;
  auto r = rig.HandOut();
  // The held request timed out, was pinged for and sent again: the other was answered at once.
  ASSERT_TRUE(r) << r.error().message;
  auto& q = rig.fake_agent.requests;
  ASSERT_GE(q.size(), 2u);
  EXPECT_TRUE((q[0] == Kind::kSetClock && q[1] == Kind::kReseed) || (q[0] == Kind::kReseed && q[1] == Kind::kSetClock));
  EXPECT_EQ(std::count(q.begin(), q.end(), Kind::kPing), 1);
  EXPECT_EQ(std::count(q.begin(), q.end(), held->kind_case()), 2);
}

TEST(Restorer, HandOutFailsWhenTheAgentRefuses) {
  Rig rig;
  rig.fake_agent.on_request = [](const agent::v1::Request& r) -> std::optional<agent::v1::Response> {
    if (!r.has_reseed()) return Answer(r);
    agent::v1::Response e;
    e.mutable_error()->set_code(agent::v1::Error::INTERNAL);
    e.mutable_error()->set_message("getrandom pool unavailable");
    return e;
  };
  auto r = rig.HandOut();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, VmError::Code::kAgent);
  EXPECT_TRUE(r.error().message.starts_with("reseed: ")) << r.error().message;
  EXPECT_NE(r.error().message.find("getrandom pool unavailable"), std::string::npos) << r.error().message;
  // A refusal is final: nothing is sent again.
  EXPECT_EQ(std::count(rig.fake_agent.requests.begin(), rig.fake_agent.requests.end(), Kind::kReseed), 1);
}

TEST(Restorer, HandOutGivesUpWhenTheAgentStaysSilent) {
  Rig rig;
  rig.settings.hand_out_ping = 400ms;
  rig.fake_agent.on_request = [](const agent::v1::Request&) { return std::optional<agent::v1::Response>(); };
  auto r = rig.HandOut();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, VmError::Code::kAgent);
}

}  // namespace
}  // namespace deskbox::vmhost
