#include "api/config.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <functional>

extern char** environ;

namespace deskbox::api {

namespace {

struct Setting {
  const char* flag;  // "--listen"; nullptr if environment only
  const char* env;   // "DESKBOX_LISTEN"
  const char* value_name;
  const char* description;
  std::function<std::expected<void, std::string>(DaemonConfig&, const std::string&)> apply;
};

std::expected<uint64_t, std::string> Unsigned(const std::string& v, uint64_t min, uint64_t max) {
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc() || p != v.data() + v.size())
    return std::unexpected(fmt::format("'{}' is not a whole number", v));
  if (n < min || n > max) return std::unexpected(fmt::format("{} is outside {}..{}", n, min, max));
  return n;
}

std::expected<void, std::string> AbsolutePath(std::string& out, const std::string& v) {
  if (v.empty() || v[0] != '/') return std::unexpected(fmt::format("'{}' is not an absolute path", v));
  out = v;
  return {};
}

template <typename T>
std::function<std::expected<void, std::string>(DaemonConfig&, const std::string&)> Number(
    T DaemonConfig::*field, uint64_t min, uint64_t max) {
  return [field, min, max](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
    auto n = Unsigned(v, min, max);
    if (!n) return std::unexpected(n.error());
    c.*field = static_cast<T>(*n);
    return {};
  };
}

std::function<std::expected<void, std::string>(DaemonConfig&, const std::string&)> Path(
    std::string DaemonConfig::*field) {
  return [field](DaemonConfig& c, const std::string& v) { return AbsolutePath(c.*field, v); };
}

const std::vector<Setting>& Settings() {
  static const std::vector<Setting> settings = {
      {"--listen", "DESKBOX_LISTEN", "HOST:PORT", "address of the HTTP API (default 127.0.0.1:8080)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         auto colon = v.rfind(':');
         if (colon == std::string::npos || colon == 0)
           return std::unexpected(fmt::format("'{}' is not HOST:PORT", v));
         std::string host = v.substr(0, colon);
         if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
         auto port = Unsigned(v.substr(colon + 1), 0, 65535);
         if (!port) return std::unexpected("port " + port.error());
         c.listen_host = host;
         c.listen_port = static_cast<uint16_t>(*port);
         return {};
       }},
      {"--state-dir", "DESKBOX_STATE_DIR", "DIR", "database, API key file, event logs (default /var/lib/deskbox)",
       Path(&DaemonConfig::state_dir)},
      {"--cache-dir", "DESKBOX_CACHE_DIR", "DIR", "guest images and templates (default /var/cache/deskbox)",
       Path(&DaemonConfig::cache_dir)},
      {nullptr, "DESKBOX_API_KEY", "KEY",
       "bootstrap API key (dbk_ + 64 hex); if unset, one is generated on first start, written to "
       "<state-dir>/api-key (mode 0600) and printed once",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         if (v.size() != 68 || !v.starts_with("dbk_") ||
             v.find_first_not_of("0123456789abcdef", 4) != std::string::npos)
           return std::unexpected("must be dbk_ followed by 64 lowercase hex digits");
         c.api_key = v;
         return {};
       }},
      {"--template", "DESKBOX_TEMPLATE", "NAME", "template directory under <cache-dir>/templates (default: the newest)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         if (v.empty() || v.find('/') != std::string::npos || v.starts_with("."))
           return std::unexpected(fmt::format("'{}' is not a template name", v));
         c.template_name = v;
         return {};
       }},
      {"--jailer-socket", "DESKBOX_JAILER_SOCKET", "PATH", "socket of deskbox-jailer (default /run/deskbox/jailer.sock)",
       Path(&DaemonConfig::jailer_socket)},
      {"--accel", "DESKBOX_ACCEL", "auto|kvm|tcg", "QEMU accelerator (default auto: kvm where the CPU has it)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         if (v != "auto" && v != "kvm" && v != "tcg") return std::unexpected(fmt::format("'{}' is not auto, kvm or tcg", v));
         c.accelerator = v;
         return {};
       }},
      {"--netns-prefix", "DESKBOX_NETNS_PREFIX", "P", "network namespace name prefix, as given to the jailer (default dbx-)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         if (v.empty() || v.size() > 24 || v.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos)
           return std::unexpected(fmt::format("'{}' must be 1-24 of [a-z0-9-]", v));
         c.netns_prefix = v;
         return {};
       }},
      {"--max-sandboxes", "DESKBOX_MAX_SANDBOXES", "N", "sandboxes alive at once, 1..1000 (default 16)",
       Number(&DaemonConfig::max_sandboxes, 1, 1000)},
      {"--creates-per-second", "DESKBOX_CREATES_PER_SECOND", "R", "sandbox creations per second, burst the same, 0.01..1000 (default 5)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         char* end = nullptr;
         errno = 0;
         double d = std::strtod(v.c_str(), &end);
         if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(d))
           return std::unexpected(fmt::format("'{}' is not a number", v));
         if (d < 0.01 || d > 1000) return std::unexpected(fmt::format("{} is outside 0.01..1000", v));
         c.creates_per_second = d;
         return {};
       }},
      {"--warm-pool", "DESKBOX_WARM_POOL", "N", "restored, ready sandboxes kept waiting, 0..64 (default 1)",
       Number(&DaemonConfig::warm_pool, 0, 64)},
      {"--prestart-pool", "DESKBOX_PRESTART_POOL", "N", "QEMU processes waiting to restore, 0..64 (default 1)",
       Number(&DaemonConfig::prestart_pool, 0, 64)},
      {"--netns-pool", "DESKBOX_NETNS_POOL", "N", "network slots made ahead, 0..64 (default 2)",
       Number(&DaemonConfig::netns_pool, 0, 64)},
      {"--default-timeout", "DESKBOX_DEFAULT_TIMEOUT_S", "SECONDS", "timeout of a sandbox created without one (default 3600)",
       Number(&DaemonConfig::default_timeout_s, 1, 7 * 24 * 3600)},
      {"--max-timeout", "DESKBOX_MAX_TIMEOUT_S", "SECONDS", "largest timeout_s a client may ask for (default 604800)",
       Number(&DaemonConfig::max_timeout_s, 1, 30 * 24 * 3600)},
  };
  return settings;
}

}  // namespace

std::map<std::string, std::string> EnvironmentMap() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos && kv.starts_with("DESKBOX_")) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string Usage() {
  std::string u =
      "usage: deskboxd [options]\n"
      "Serves the deskbox REST API. Runs unprivileged, next to deskbox-jailer (root).\n\n"
      "  flag                      environment                  meaning\n";
  for (const auto& s : Settings()) {
    std::string flag = s.flag ? fmt::format("{} {}", s.flag, s.value_name) : "";
    u += fmt::format("  {:<25} {:<28} {}\n", flag, s.env, s.description);
  }
  u += fmt::format("  {:<25} {:<28} {}\n", "--destroy-on-exit", "",
                   "on SIGTERM destroy sandboxes too (default: keep them for the next start)");
  return u;
}

std::expected<ConfigOutcome, std::string> ParseConfig(const std::vector<std::string>& args,
                                                      const std::map<std::string, std::string>& env) {
  ConfigOutcome out;
  for (const auto& s : Settings()) {
    auto it = env.find(s.env);
    if (it == env.end()) continue;
    if (auto r = s.apply(out.config, it->second); !r) return std::unexpected(fmt::format("{}: {}", s.env, r.error()));
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      out.help = true;
      continue;
    }
    if (a == "--destroy-on-exit") {
      out.config.destroy_on_exit = true;
      continue;
    }
    std::string name = a, value;
    bool inline_value = false;
    if (auto eq = a.find('='); a.starts_with("--") && eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
      inline_value = true;
    }
    const Setting* found = nullptr;
    for (const auto& s : Settings())
      if (s.flag && name == s.flag) found = &s;
    if (!found) return std::unexpected(fmt::format("unknown option '{}' (see --help)", a));
    if (!inline_value) {
      if (i + 1 >= args.size()) return std::unexpected(fmt::format("{} needs a value", name));
      value = args[++i];
    }
    if (auto r = found->apply(out.config, value); !r) return std::unexpected(fmt::format("{}: {}", name, r.error()));
  }
  return out;
}

}  // namespace deskbox::api
