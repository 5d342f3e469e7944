// deskbox-guest: talks to a guest agent directly over its socket, for operators debugging a
// guest (template builds, a slot's agent.sock while nothing else holds it).
//   deskbox-guest --agent-socket PATH ping | ready | exec SHELL-COMMAND
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "vmhost/agent_client.h"

namespace asio = boost::asio;
using namespace deskbox;
using namespace std::chrono_literals;

int main(int argc, char** argv) {
  if (argc < 4 || std::string(argv[1]) != "--agent-socket") {
    std::cerr << "usage: deskbox-guest --agent-socket PATH ping|ready|exec COMMAND\n";
    return 2;
  }
  asio::io_context io;
  asio::local::stream_protocol::socket sock(io);
  boost::system::error_code ec;
  sock.connect(asio::local::stream_protocol::endpoint(argv[2]), ec);
  if (ec) {
    std::cerr << "deskbox-guest: connect " << argv[2] << ": " << ec.message() << "\n";
    return 1;
  }
  vmhost::AgentClient agent(std::move(sock));
  std::string verb = argv[3];
  agent::v1::Request req;
  if (verb == "ping") {
    req.mutable_ping();
  } else if (verb == "ready") {
    req.mutable_ready();
  } else if (verb == "exec" && argc >= 5) {
    req.mutable_exec()->set_shell(argv[4]);
  } else {
    std::cerr << "deskbox-guest: unknown command\n";
    return 2;
  }
  int rc = 1;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto r = co_await agent.Call(req, 120s);
    if (!r) {
      std::cerr << "deskbox-guest: " << r.error().message << "\n";
    } else if (r->has_exec()) {
      std::fwrite(r->exec().stdout().data(), 1, r->exec().stdout().size(), stdout);
      std::fwrite(r->exec().stderr().data(), 1, r->exec().stderr().size(), stderr);
      rc = r->exec().exit_code();
    } else if (r->has_ready()) {
      const auto& s = r->ready();
      std::printf("ready=%d x=%d cdp=%d paint=%d settled=%d idle=%.2f chromium=%s screen=%ux%u\n", s.ready(),
                  s.x_ready(), s.cdp_ready(), s.first_paint(), s.settled(), s.idle_fraction(),
                  s.chromium_version().c_str(), s.screen_width(), s.screen_height());
      rc = 0;
    } else {
      std::printf("pong\n");
      rc = 0;
    }
    agent.Close();
  }, asio::detached);
  io.run();
  return rc;
}
