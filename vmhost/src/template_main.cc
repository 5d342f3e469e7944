// deskbox-template: builds (or finds) the template snapshot for an image and prints its
// directory name under <cache>/templates. Runs as root; QEMU runs jailed by deskbox-jailer.
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "common/log.h"
#include "vmhost/jailer_client.h"
#include "vmhost/jailer_process.h"
#include "vmhost/template_builder.h"

namespace asio = boost::asio;
using namespace deskbox::vmhost;

int main(int argc, char** argv) {
  TemplateBuildOptions o;
  std::string jailer_socket;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "deskbox-template: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--cache-dir") o.cache_dir = next();
    else if (a == "--image") o.image_name = next();
    else if (a == "--name") o.name = next();
    else if (a == "--cpu") o.cpu_model = next();
    else if (a == "--accel") o.accelerator = next();
    else if (a == "--memory-mib") o.memory_mib = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--smp") o.smp = static_cast<uint32_t>(std::strtoul(next().c_str(), nullptr, 10));
    else if (a == "--boot-timeout") o.boot_timeout = std::chrono::seconds(std::strtoul(next().c_str(), nullptr, 10));
    else if (a == "--agent-timeout") o.agent_timeout = std::chrono::seconds(std::strtoul(next().c_str(), nullptr, 10));
    else if (a == "--attempts") o.attempts = std::atoi(next().c_str());
    else if (a == "--jailer-socket") jailer_socket = next();
    else if (a == "--screen") {
      std::string v = next();
      if (std::sscanf(v.c_str(), "%ux%u", &o.screen_width, &o.screen_height) != 2 ||
          o.screen_width < 640 || o.screen_height < 480 || o.screen_width > 3840 || o.screen_height > 2160) {
        std::cerr << "deskbox-template: --screen wants WxH between 640x480 and 3840x2160\n";
        return 2;
      }
    } else {
      std::cerr << "usage: deskbox-template --image NAME [--cache-dir DIR] [--name N] [--screen WxH]\n"
                   "         [--cpu MODEL] [--accel auto|kvm|tcg] [--memory-mib N] [--smp N]\n"
                   "         [--boot-timeout S] [--agent-timeout S] [--attempts N] [--jailer-socket PATH]\n";
      return 2;
    }
  }
  if (o.image_name.empty()) {
    std::cerr << "deskbox-template: --image is required\n";
    return 2;
  }
  std::optional<JailerProcess> own_jailer;
  std::string own_state;
  if (jailer_socket.empty()) {
    if (::geteuid() != 0) {
      std::cerr << "deskbox-template: must run as root (or pass --jailer-socket)\n";
      return 1;
    }
    jailer_socket = "/run/deskbox/template-" + std::to_string(::getpid()) + ".sock";
    std::string state = "/run/deskbox/template-" + std::to_string(::getpid());
    auto j = JailerProcess::Start(SelfDir() + "/deskbox-jailer",
                                  {"--socket", jailer_socket, "--cache-dir", o.cache_dir,
                                   "--state-dir", state, "--netns-prefix", "dbxtpl-",
                                   "--cgroup-name", "deskbox-template"},
                                  jailer_socket);
    if (!j) {
      std::cerr << "deskbox-template: " << j.error() << "\n";
      return 1;
    }
    own_jailer.emplace(std::move(*j));
    own_state = state;
  }
  asio::io_context io;
  auto client = JailerClient::Connect(io.get_executor(), jailer_socket);
  if (!client) {
    std::cerr << "deskbox-template: " << client.error() << "\n";
    return 1;
  }
  std::expected<std::string, std::string> result = std::unexpected(std::string("not run"));
  // Interrupted: take the build's slot down (QEMU, netns, cgroup) before leaving; the staging
  // directory is removed by the next build.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](boost::system::error_code ec, int) {
    if (ec) return;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      deskbox::jailer::v1::Request req;
      req.mutable_destroy_slot()->set_slot(o.slot);
      (void)co_await (*client)->Call(std::move(req));
      result = std::unexpected(std::string("interrupted"));
      io.stop();
    }, asio::detached);
  });
  asio::co_spawn(io, BuildTemplate(**client, o), [&](std::exception_ptr e, auto r) {
    if (e) result = std::unexpected(std::string("internal error"));
    else result = std::move(r);
    signals.cancel();
    io.stop();
  });
  io.run();
  client->reset();
  own_jailer.reset();
  if (!own_state.empty()) std::filesystem::remove_all(own_state);
  if (!result) {
    std::cerr << "deskbox-template: " << result.error() << "\n";
    return 1;
  }
  std::cout << *result << "\n";
  return 0;
}
