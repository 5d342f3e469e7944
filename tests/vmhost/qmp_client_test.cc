// QmpClient against a scripted peer on a socketpair (no QEMU): id matching, errors, events,
// timeouts, and a peer that closes.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/local/connect_pair.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "vmhost/qmp.h"

namespace deskbox::vmhost {
namespace {
namespace asio = boost::asio;
using nlohmann::json;
using namespace std::chrono_literals;

struct Pair {
  asio::io_context io;
  std::unique_ptr<QmpClient> client;
  asio::local::stream_protocol::socket peer{io};
  Pair() {
    asio::local::stream_protocol::socket a(io);
    asio::local::connect_pair(a, peer);
    client = std::make_unique<QmpClient>(std::move(a));
  }
  void Run(std::function<asio::awaitable<void>()> f) {
    bool done = false;
    asio::co_spawn(io, f(), [&](std::exception_ptr e) {
      done = true;
      io.stop();
      if (e) std::rethrow_exception(e);
    });
    io.run_for(10s);
    ASSERT_TRUE(done);
  }
};

asio::awaitable<json> PeerRead(asio::local::stream_protocol::socket& s, asio::streambuf& buf) {
  co_await asio::async_read_until(s, buf, '\n', asio::use_awaitable);
  std::istream is(&buf);
  std::string line;
  std::getline(is, line);
  co_return json::parse(line);
}
asio::awaitable<void> PeerWrite(asio::local::stream_protocol::socket& s, const json& j) {
  std::string line = j.dump() + "\r\n";
  co_await asio::async_write(s, asio::buffer(line), asio::use_awaitable);
}

TEST(QmpClient, HandshakeCommandsErrorsAndEvents) {
  Pair p;
  asio::streambuf buf;
  asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
    { json m_ = {{"QMP", {{"version", json::object()}, {"capabilities", json::array()}}}}; co_await PeerWrite(p.peer, m_); }
    json caps = co_await PeerRead(p.peer, buf);
    EXPECT_EQ(caps["execute"], "qmp_capabilities");
    { json m_ = {{"return", json::object()}, {"id", caps["id"]}}; co_await PeerWrite(p.peer, m_); }
    json q = co_await PeerRead(p.peer, buf);
    EXPECT_EQ(q["execute"], "query-status");
    { json m_ = {{"event", "STOP"}, {"data", json::object()}}; co_await PeerWrite(p.peer, m_); }
    { json m_ = {{"return", {{"status", "running"}}}, {"id", q["id"]}}; co_await PeerWrite(p.peer, m_); }
    json bad = co_await PeerRead(p.peer, buf);
    { json m_ = {{"error", {{"class", "GenericError"}, {"desc", "nope"}}}, {"id", bad["id"]}}; co_await PeerWrite(p.peer, m_); }
  }, asio::detached);
  p.Run([&]() -> asio::awaitable<void> {
    auto hs = co_await p.client->Handshake(2s);
    EXPECT_TRUE(hs) << hs.error().message;
    auto st = co_await p.client->Execute("query-status");
    EXPECT_TRUE(st);
    if (st) { EXPECT_EQ((*st)["status"], "running"); }
    auto ev = co_await p.client->WaitEvent("STOP", 1s);
    EXPECT_TRUE(ev);
    auto err = co_await p.client->Execute("bogus");
    EXPECT_FALSE(err);
    if (!err) {
      EXPECT_EQ(err.error().code, QmpError::Code::kCommand);
      EXPECT_NE(err.error().message.find("nope"), std::string::npos);
    }
  });
}

TEST(QmpClient, TimeoutAndPeerClose) {
  Pair p;
  asio::streambuf buf;
  asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
    { json m_ = {{"QMP", json::object()}}; co_await PeerWrite(p.peer, m_); }
    json caps = co_await PeerRead(p.peer, buf);
    { json m_ = {{"return", json::object()}, {"id", caps["id"]}}; co_await PeerWrite(p.peer, m_); }
    (void)co_await PeerRead(p.peer, buf);  // never answered: the client times out
    (void)co_await PeerRead(p.peer, buf);
    p.peer.close();
  }, asio::detached);
  p.Run([&]() -> asio::awaitable<void> {
    EXPECT_TRUE(co_await p.client->Handshake(2s));
    auto slow = co_await p.client->Execute("query-status", json::object(), 100ms);
    EXPECT_FALSE(slow);
    if (!slow) { EXPECT_EQ(slow.error().code, QmpError::Code::kTimeout); }
    auto closed = co_await p.client->Execute("query-status", json::object(), 5s);
    EXPECT_FALSE(closed);
    if (!closed) { EXPECT_EQ(closed.error().code, QmpError::Code::kClosed); }
    EXPECT_TRUE(p.client->closed());
  });
}

}  // namespace
}  // namespace deskbox::vmhost
