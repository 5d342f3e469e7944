// deskbox-forward: publishes one TCP port on another address, e.g. Chromium's DevTools port
// (which listens on 127.0.0.1 only) on the guest's network address. See README.md.
#include <signal.h>
#include <sys/signalfd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "common/unique_fd.h"
#include "forward/tcp_relay.h"

namespace {

void Usage() {
  std::fprintf(stderr,
               "usage: deskbox-forward LISTEN UPSTREAM [--max-connections=N]\n"
               "  LISTEN, UPSTREAM  IPv4:port or [IPv6]:port, numeric\n"
               "  e.g. deskbox-forward 10.88.0.2:9222 127.0.0.1:9223\n");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace deskbox::forward;
  std::string listen_text, upstream_text;
  RelayLimits limits;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      Usage();
      return 0;
    }
    if (arg.starts_with("--max-connections=")) {
      char* end = nullptr;
      const long n = std::strtol(argv[i] + 18, &end, 10);
      if (end == argv[i] + 18 || *end != '\0' || n < 1 || n > 65536) {
        std::fprintf(stderr, "deskbox-forward: --max-connections wants 1..65536\n");
        return 2;
      }
      limits.max_connections = static_cast<size_t>(n);
    } else if (listen_text.empty()) {
      listen_text = arg;
    } else if (upstream_text.empty()) {
      upstream_text = arg;
    } else {
      Usage();
      return 2;
    }
  }
  if (upstream_text.empty()) {
    Usage();
    return 2;
  }
  auto listen = SocketAddress::Parse(listen_text);
  auto upstream = SocketAddress::Parse(upstream_text);
  if (!listen || !upstream) {
    std::fprintf(stderr, "deskbox-forward: %s\n",
                 (!listen ? listen.error() : upstream.error()).c_str());
    return 2;
  }

  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  deskbox::UniqueFd stop_fd(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!stop_fd) {
    std::perror("deskbox-forward: signalfd");
    return 1;
  }

  auto relay = TcpRelay::Listen(*listen, *upstream, limits);
  if (!relay) {
    std::fprintf(stderr, "deskbox-forward: %s\n", relay.error().c_str());
    return 1;
  }
  std::fprintf(stderr, "deskbox-forward: %s -> %s\n", (*relay)->listen_address().ToString().c_str(),
               upstream->ToString().c_str());
  if (auto run = (*relay)->Run(stop_fd.get()); !run) {
    std::fprintf(stderr, "deskbox-forward: %s\n", run.error().c_str());
    return 1;
  }
  return 0;
}
