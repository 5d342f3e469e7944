// deskbox-jailer: the privileged helper. See vmhost/README.md.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "vmhost/jailer_process.h"
#include "vmhost/jailer_server.h"

namespace {
void Usage() {
  std::cerr << "usage: deskbox-jailer [--socket PATH] [--cache-dir DIR] [--state-dir DIR]\n"
               "         [--client-uid UID] [--socket-gid GID] [--uid-base UID]\n"
               "         [--netns-prefix P] [--cgroup-name N] [--qemu PATH] [--no-seccomp]\n"
               "         [--sweep-on-exit] [--uplink-netns NAME]\n"
               "         [--tcg-trim-plugin PATH | --no-tcg-trim]\n";
}
}  // namespace

int main(int argc, char** argv) {
  deskbox::vmhost::JailerConfig config;
  // Beside this binary in the build tree: bin/deskbox-jailer, qemu-plugins/libdeskbox-tcgtrim.so.
  config.tcg_trim_plugin = deskbox::vmhost::SelfDir() + "/../qemu-plugins/libdeskbox-tcgtrim.so";
  if (char* real = ::realpath(config.tcg_trim_plugin.c_str(), nullptr)) {
    config.tcg_trim_plugin = real;
    std::free(real);
  }
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "deskbox-jailer: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    auto number = [&](const std::string& v) -> unsigned long {
      char* end = nullptr;
      unsigned long n = std::strtoul(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0') {
        std::cerr << "deskbox-jailer: " << a << " wants a number, got '" << v << "'\n";
        std::exit(2);
      }
      return n;
    };
    if (a == "--socket") config.socket_path = next();
    else if (a == "--cache-dir") config.cache_dir = next();
    else if (a == "--state-dir") config.state_dir = next();
    else if (a == "--client-uid") config.client_uid = static_cast<uid_t>(number(next()));
    else if (a == "--socket-gid") config.socket_gid = static_cast<gid_t>(number(next()));
    else if (a == "--uid-base") config.uid_base = static_cast<uid_t>(number(next()));
    else if (a == "--netns-prefix") config.netns_prefix = next();
    else if (a == "--cgroup-name") config.cgroup_name = next();
    else if (a == "--qemu") config.qemu_binary = next();
    else if (a == "--no-seccomp") config.seccomp = false;
    else if (a == "--sweep-on-exit") config.sweep_on_exit = true;
    else if (a == "--uplink-netns") config.uplink_netns = next();
    else if (a == "--tcg-trim-plugin") config.tcg_trim_plugin = next();
    else if (a == "--no-tcg-trim") config.tcg_trim_plugin.clear();
    else if (a == "-h" || a == "--help") { Usage(); return 0; }
    else { std::cerr << "deskbox-jailer: unknown option " << a << "\n"; Usage(); return 2; }
  }
  if (config.uid_base < 1000) {
    std::cerr << "deskbox-jailer: --uid-base must be at least 1000\n";
    return 2;
  }
  if (!config.uplink_netns.empty()) {
    std::string path = "/run/netns/" + config.uplink_netns;
    if (config.uplink_netns.find('/') != std::string::npos || config.uplink_netns[0] == '.' ||
        ::access(path.c_str(), F_OK) != 0) {
      std::cerr << "deskbox-jailer: --uplink-netns " << config.uplink_netns << ": no such network namespace in /run/netns\n";
      return 2;
    }
  }
  deskbox::vmhost::JailerServer server(config);
  return server.Run();
}
