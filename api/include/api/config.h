#pragma once
// deskboxd's configuration: every setting has a flag, an environment variable, a default, a
// range and a description (the table in docs/api.md is printed by `deskboxd --help`). Flags win
// over the environment. A bad value stops the daemon with a message naming the setting.
#include <chrono>
#include <cstdint>
#include <expected>
#include <map>
#include <string>
#include <vector>

#include "common/log.h"
#include "vmhost/qemu_command.h"

namespace deskbox::api {

struct DaemonConfig {
  std::string listen_host = "127.0.0.1";
  uint16_t listen_port = 8080;
  std::string state_dir = "/var/lib/deskbox";
  std::string cache_dir = "/var/cache/deskbox";
  std::string novnc_dir = "/usr/share/novnc";  // noVNC (Debian's novnc package), for the view page
  log::Format log_format = log::Format::kText;
  std::string api_key;  // bootstrap key (DESKBOX_API_KEY); empty: generate on first start
  std::string template_name;  // empty: the newest complete template in the cache
  std::string jailer_socket = "/run/deskbox/jailer.sock";
  // deskboxd and the jailer may start in either order (a service manager, scripts/up after a
  // crash left the old socket file): deskboxd waits this long for the jailer to answer.
  uint32_t jailer_wait_s = 30;
  std::string accelerator = "auto";
  std::string netns_prefix = "dbx-";
  uint32_t max_sandboxes = 16;
  double creates_per_second = 5;
  uint32_t warm_pool = 1;
  uint32_t prestart_pool = 1;
  uint32_t netns_pool = 2;
  uint32_t tb_size_mib = vmhost::kDefaultTbSizeMib;
  uint32_t browser_refreshes = 0;  // at once after hand-outs; 0: host CPUs / guest vCPUs
  uint32_t trim_idle_after_s = 60;  // idle sandboxes' translation cache back to the host; 0: never
  uint32_t trim_regrown_mib = 48;   // trimmed and still idle: again once the cache is this big
  uint32_t default_timeout_s = 3600;
  uint32_t max_timeout_s = 7 * 24 * 3600;
  bool destroy_on_exit = false;
  // Egress (docs/egress.md).
  std::string egress_default = "deny";          // a new sandbox's policy default
  std::vector<std::string> egress_reachable;    // CIDRs the address guard lets through
  std::vector<std::string> egress_resolvers;    // "IP" or "IP:PORT" / "[v6]:PORT"; empty: /etc/resolv.conf
  uint32_t egress_dns_qps = 100;
  // Screen recording (docs/recording.md).
  bool recording = true;                 // a sandbox created without "recording" records
  std::string recording_dir;             // "": <state-dir>/recordings
  uint32_t recording_fps = 15;           // at most this many frames a second
  uint32_t recording_segment_s = 60;     // a segment's longest duration
  uint32_t recording_keyframe_s = 2;     // keyframes while the screen changes, fragments on disk: this often
  uint64_t recording_quota_mib = 20480;  // all recordings together
  uint32_t recording_retention_days = 30;  // a recording is removed this long after its sandbox ended
  uint64_t recording_max_mib = 4096;     // one recording: it stops growing beyond this
};

// "IP", "IP:PORT" or "[IPv6]:PORT" (port 53 if none) → address and port, or a message.
std::expected<std::pair<std::string, uint16_t>, std::string> ParseResolver(const std::string& v);
// The nameserver lines of a resolv.conf text, as ParseResolver input.
std::vector<std::string> ResolversFromResolvConf(const std::string& text);

struct ConfigOutcome {
  DaemonConfig config;
  bool help = false;  // --help was given: print Usage() and exit 0
};

// Parses argv (flags) over `env` (environment variables). Returns a message naming the bad
// setting on error.
std::expected<ConfigOutcome, std::string> ParseConfig(const std::vector<std::string>& args,
                                                      const std::map<std::string, std::string>& env);
std::map<std::string, std::string> EnvironmentMap();
std::string Usage();

// `deskboxd backup --to FILE [--state-dir DIR]`: copy the state database (api/store.h Backup).
struct BackupCommand {
  std::string state_dir = "/var/lib/deskbox";  // --state-dir or DESKBOX_STATE_DIR, as for the daemon
  std::string to;                              // a file that does not exist yet
};
// The arguments after "backup".
std::expected<BackupCommand, std::string> ParseBackupCommand(const std::vector<std::string>& args,
                                                             const std::map<std::string, std::string>& env);

}  // namespace deskbox::api
