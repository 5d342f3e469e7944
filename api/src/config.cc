#include "api/config.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <algorithm>
#include <boost/asio/ip/address.hpp>
#include <functional>

#include "egress/policy.h"

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

std::vector<std::string> SplitList(const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= v.size()) {
    size_t comma = v.find(',', start);
    std::string item = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

static_assert(vmhost::kMinTbSizeMib == 16 && vmhost::kMaxTbSizeMib == 2048 && vmhost::kDefaultTbSizeMib == 512,
              "the --tb-size description states these");

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
      {"--novnc-dir", "DESKBOX_NOVNC_DIR", "DIR", "noVNC for the live view page (default /usr/share/novnc)",
       Path(&DaemonConfig::novnc_dir)},
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
      {"--jailer-wait", "DESKBOX_JAILER_WAIT", "SECONDS",
       "how long to wait at start for deskbox-jailer to accept a connection, 0..600 (default 30)",
       Number(&DaemonConfig::jailer_wait_s, 0, 600)},
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
      {"--tb-size", "DESKBOX_TB_SIZE_MIB", "MIB",
       "TCG translation cache per sandbox in MiB, 16..2048 (default 512; ignored under KVM)",
       Number(&DaemonConfig::tb_size_mib, vmhost::kMinTbSizeMib, vmhost::kMaxTbSizeMib)},
      {"--browser-refreshes", "DESKBOX_BROWSER_REFRESHES", "N",
       "browser refreshes after restores that run at once, 0..256 (default 0: host CPUs / guest vCPUs)",
       Number(&DaemonConfig::browser_refreshes, 0, 256)},
      {"--trim-idle-after", "DESKBOX_TRIM_IDLE_AFTER_S", "SECONDS",
       "under TCG, hand an idle sandbox's translation cache back to the host after this long idle, 0..86400 (default 60; 0: never)",
       Number(&DaemonConfig::trim_idle_after_s, 0, 86400)},
      {"--trim-regrown-mib", "DESKBOX_TRIM_REGROWN_MIB", "MIB",
       "trim a sandbox that stayed idle again once its translation cache has grown back past this, 0..2048 (default 48; 0: never)",
       Number(&DaemonConfig::trim_regrown_mib, 0, 2048)},
      {"--default-timeout", "DESKBOX_DEFAULT_TIMEOUT_S", "SECONDS", "timeout of a sandbox created without one (default 3600)",
       Number(&DaemonConfig::default_timeout_s, 1, 7 * 24 * 3600)},
      {"--max-timeout", "DESKBOX_MAX_TIMEOUT_S", "SECONDS", "largest timeout_s a client may ask for (default 604800)",
       Number(&DaemonConfig::max_timeout_s, 1, 30 * 24 * 3600)},
      {"--egress-default", "DESKBOX_EGRESS_DEFAULT", "deny|allow",
       "egress default of a sandbox created without one (default deny)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         if (v != "deny" && v != "allow") return std::unexpected(fmt::format("'{}' is not deny or allow", v));
         c.egress_default = v;
         return {};
       }},
      {"--egress-reachable", "DESKBOX_EGRESS_REACHABLE", "CIDR,...",
       "private/loopback/link-local ranges egress may dial anyway (default none)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         c.egress_reachable.clear();
         for (const auto& item : SplitList(v)) {
           auto cidr = egress::ParseCidr(item);
           if (!cidr) return std::unexpected(cidr.error().message);
           c.egress_reachable.push_back(cidr->ToString());
         }
         return {};
       }},
      {"--egress-resolvers", "DESKBOX_EGRESS_RESOLVERS", "IP[:PORT],...",
       "upstream DNS resolvers egress asks, dialed from the uplink netns (default: /etc/resolv.conf's)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         c.egress_resolvers.clear();
         for (const auto& item : SplitList(v)) {
           if (auto r = ParseResolver(item); !r) return std::unexpected(r.error());
           c.egress_resolvers.push_back(item);
         }
         if (c.egress_resolvers.size() > 8) return std::unexpected("at most 8 resolvers");
         return {};
       }},
      {"--egress-dns-qps", "DESKBOX_EGRESS_DNS_QPS", "N", "DNS queries a sandbox may send per second, 1..10000 (default 100)",
       Number(&DaemonConfig::egress_dns_qps, 1, 10000)},
      {"--recording", "DESKBOX_RECORDING", "on|off",
       "record the screen of a sandbox created without a \"recording\" member (default on)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         if (v == "on") c.recording = true;
         else if (v == "off") c.recording = false;
         else return std::unexpected(fmt::format("'{}' is not on or off", v));
         return {};
       }},
      {"--recording-dir", "DESKBOX_RECORDING_DIR", "DIR", "screen recordings (default <state-dir>/recordings)",
       Path(&DaemonConfig::recording_dir)},
      {"--recording-fps", "DESKBOX_RECORDING_FPS", "N", "most frames a second a recording takes, 1..60 (default 15)",
       Number(&DaemonConfig::recording_fps, 1, 60)},
      {"--recording-segment", "DESKBOX_RECORDING_SEGMENT_S", "SECONDS",
       "longest recording segment, 10..600 (default 60)", Number(&DaemonConfig::recording_segment_s, 10, 600)},
      {"--recording-keyframe", "DESKBOX_RECORDING_KEYFRAME_S", "SECONDS",
       "keyframes at most this far apart while the screen changes, and fragments at most this long; a crash loses at most this much video, 1..10 (default 2)",
       Number(&DaemonConfig::recording_keyframe_s, 1, 10)},
      {"--recording-quota", "DESKBOX_RECORDING_QUOTA_MIB", "MIB",
       "disk for all recordings; over it, recordings of deleted sandboxes go first, oldest first, then "
       "recording stops, 1..16777216 (default 20480)",
       Number(&DaemonConfig::recording_quota_mib, 1, uint64_t{1} << 24)},
      {"--recording-retention", "DESKBOX_RECORDING_RETENTION_DAYS", "DAYS",
       "keep a recording this long after its sandbox ended, 0..3650 (default 30; 0: until the quota needs the room)",
       Number(&DaemonConfig::recording_retention_days, 0, 3650)},
      {"--recording-max", "DESKBOX_RECORDING_MAX_MIB", "MIB",
       "largest recording of one sandbox; recording stops there, 1..16777216 (default 4096)",
       Number(&DaemonConfig::recording_max_mib, 1, uint64_t{1} << 24)},
      {"--log-format", "DESKBOX_LOG_FORMAT", "text|json",
       "log lines as text, or as JSON objects with time, level, component, message, sandbox_id and "
       "request_id (default text)",
       [](DaemonConfig& c, const std::string& v) -> std::expected<void, std::string> {
         if (v == "text") c.log_format = log::Format::kText;
         else if (v == "json") c.log_format = log::Format::kJson;
         else return std::unexpected(fmt::format("'{}' is not text or json", v));
         return {};
       }},
  };
  return settings;
}

}  // namespace

std::expected<std::pair<std::string, uint16_t>, std::string> ParseResolver(const std::string& v) {
  std::string host = v;
  uint16_t port = 53;
  std::string port_text;
  if (v.starts_with("[")) {
    auto close = v.find(']');
    if (close == std::string::npos) return std::unexpected(fmt::format("'{}': '[' without ']'", v));
    host = v.substr(1, close - 1);
    if (close + 1 < v.size()) {
      if (v[close + 1] != ':') return std::unexpected(fmt::format("'{}': only :PORT may follow ']'", v));
      port_text = v.substr(close + 2);
    }
  } else if (std::count(v.begin(), v.end(), ':') == 1) {
    host = v.substr(0, v.find(':'));
    port_text = v.substr(v.find(':') + 1);
    if (port_text.empty()) return std::unexpected(fmt::format("'{}': ':' without a port", v));
  }
  if (!port_text.empty() || (v.starts_with("[") && v.ends_with(":"))) {
    auto p = Unsigned(port_text, 1, 65535);
    if (!p) return std::unexpected(fmt::format("'{}': port {}", v, p.error()));
    port = static_cast<uint16_t>(*p);
  }
  boost::system::error_code ec;
  auto a = boost::asio::ip::make_address(host, ec);
  if (ec || host.find('%') != std::string::npos) return std::unexpected(fmt::format("'{}' is not an IP address", host));
  return std::make_pair(a.to_string(), port);
}

std::vector<std::string> ResolversFromResolvConf(const std::string& text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size() && out.size() < 3) {
    size_t end = text.find('\n', pos);
    std::string line = text.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? text.size() : end + 1;
    if (!line.starts_with("nameserver")) continue;
    auto first = line.find_first_not_of(" \t", 10);
    if (first == std::string::npos || first == 10) continue;
    std::string addr = line.substr(first);
    addr = addr.substr(0, addr.find_first_of(" \t#;"));
    if (addr.find(':') != std::string::npos) addr = "[" + addr + "]";  // v6: keep the port form unambiguous
    if (ParseResolver(addr)) out.push_back(addr);
  }
  return out;
}

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
      "       deskboxd backup --to FILE [--state-dir DIR]\n"
      "Serves the deskbox REST API. Runs unprivileged, next to deskbox-jailer (root).\n"
      "backup: copies the state database consistently, also while deskboxd runs, to FILE (which\n"
      "must not exist), and checks the copy; run it as the user deskboxd runs as.\n\n"
      "  flag                      environment                  meaning\n";
  for (const auto& s : Settings()) {
    std::string flag = s.flag ? fmt::format("{} {}", s.flag, s.value_name) : "";
    u += fmt::format("  {:<25} {:<28} {}\n", flag, s.env, s.description);
  }
  u += fmt::format("  {:<25} {:<28} {}\n", "--destroy-on-exit", "",
                   "on SIGTERM destroy sandboxes too (default: keep them for the next start)");
  return u;
}

std::expected<BackupCommand, std::string> ParseBackupCommand(const std::vector<std::string>& args,
                                                             const std::map<std::string, std::string>& env) {
  BackupCommand out;
  if (auto it = env.find("DESKBOX_STATE_DIR"); it != env.end())
    if (auto r = AbsolutePath(out.state_dir, it->second); !r)
      return std::unexpected(fmt::format("DESKBOX_STATE_DIR: {}", r.error()));
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i], value;
    if (auto eq = name.find('='); name.starts_with("--") && eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    } else if (name == "--state-dir" || name == "--to") {
      if (i + 1 >= args.size()) return std::unexpected(fmt::format("backup: {} needs a value", name));
      value = args[++i];
    }
    if (name == "--state-dir") {
      if (auto r = AbsolutePath(out.state_dir, value); !r) return std::unexpected("backup: --state-dir: " + r.error());
    } else if (name == "--to") {
      if (value.empty()) return std::unexpected("backup: --to needs a file name");
      out.to = value;
    } else {
      return std::unexpected(fmt::format("backup: unknown option '{}' (deskboxd backup --to FILE [--state-dir DIR])",
                                         args[i]));
    }
  }
  if (out.to.empty()) return std::unexpected("backup: --to FILE is required");
  return out;
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
  if (out.config.recording_dir.empty()) out.config.recording_dir = out.config.state_dir + "/recordings";
  return out;
}

}  // namespace deskbox::api
