// deskboxd: runs unprivileged and talks to deskbox-jailer (root) over its socket. For now it
// fills the pools, restores one sandbox from the template and prints how to reach it; the REST
// API (api/openapi.yaml) is the next step.
#include <signal.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

#include "common/log.h"
#include "vmhost/jailer_client.h"
#include "vmhost/sandbox_manager.h"

namespace asio = boost::asio;
using namespace deskbox;

int main(int argc, char** argv) {
  vmhost::VmHostConfig config;
  std::string jailer_socket = "/run/deskbox/jailer.sock";
  std::string netns_prefix = "dbx-";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "deskboxd: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--jailer-socket") jailer_socket = next();
    else if (a == "--cache-dir") config.cache_dir = next();
    else if (a == "--template") config.template_name = next();
    else if (a == "--accel") config.accelerator = next();
    else if (a == "--netns-prefix") netns_prefix = next();
    else if (a == "--warm-pool") config.warm_pool = static_cast<uint32_t>(std::atoi(next().c_str()));
    else if (a == "--prestart-pool") config.prestart_pool = static_cast<uint32_t>(std::atoi(next().c_str()));
    else {
      std::cerr << "usage: deskboxd --template NAME [--jailer-socket PATH] [--cache-dir DIR]\n"
                   "                [--accel auto|kvm|tcg] [--warm-pool N] [--prestart-pool N]\n";
      return 2;
    }
  }
  if (config.template_name.empty()) {
    std::cerr << "deskboxd: --template is required\n";
    return 2;
  }
  if (::geteuid() == 0) {
    std::cerr << "deskboxd: refusing to run as root: it parses bytes from guests; run it as an "
                 "unprivileged user (scripts/up uses the 'deskbox' user)\n";
    return 1;
  }
  asio::io_context io;
  auto jailer = vmhost::JailerClient::Connect(io.get_executor(), jailer_socket);
  if (!jailer) {
    std::cerr << "deskboxd: " << jailer.error() << "\n";
    return 1;
  }
  vmhost::SandboxManager manager(io.get_executor(), **jailer, config);
  if (auto s = manager.Start(); !s) {
    std::cerr << "deskboxd: " << s.error().message << "\n";
    return 1;
  }
  int exit_code = 0;
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code, int sig) {
    log::Info("deskboxd", "signal {}: destroying sandboxes", sig);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      co_await manager.Shutdown();
      io.stop();
    }, asio::detached);
  });
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    auto t0 = std::chrono::steady_clock::now();
    auto sb = co_await manager.Create();
    if (!sb) {
      log::Error("deskboxd", "create: {}", sb.error().message);
      exit_code = 1;
      co_await manager.Shutdown();
      io.stop();
      co_return;
    }
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::string ns = netns_prefix + std::to_string((*sb)->slot);
    std::printf(
        "\nsandbox %s is running (restored in %.0f ms, %s)\n"
        "  Chromium DevTools:  ip netns exec %s curl -s http://10.88.0.2:9222/json/version\n"
        "  RFB (VNC):          ip netns exec %s nc 10.88.0.2 5900\n"
        "Ctrl-C destroys it.\n",
        (*sb)->id.c_str(), ms, std::string(vmhost::ToString((*sb)->path)).c_str(), ns.c_str(),
        ns.c_str());
    std::fflush(stdout);
  }, asio::detached);
  io.run();
  return exit_code;
}
