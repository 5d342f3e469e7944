#include "vmhost/jailer_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <grp.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <vector>

#include "common/files.h"
#include "common/log.h"
#include "common/process.h"
#include "common/slot_network.h"
#include "common/smaps.h"
#include "jailer_util.h"
#include "vmhost/fd_passing.h"
#include "vmhost/nflog_bind.h"
#include "vmhost/qemu_command.h"
#include "vmhost/template.h"

namespace deskbox::vmhost {
namespace {

using namespace jailer_util;
using jailer::v1::Request;
using jailer::v1::Response;
constexpr char kJailerLog[] = "jailer";

std::string NetnsRuleset() {
  // Nothing leaves the slot's netns by routing: there is no route out. What the guest sends is
  // either TCP, sent to deskboxd's egress proxy listening here (any destination, any port: the
  // proxy reads the original destination and decides), or UDP 53, sent to deskboxd's DNS
  // responder here. Everything else — other UDP (QUIC included), ICMP, other protocols — is
  // refused at once (RST / ICMP admin-prohibited, so programs fail fast instead of waiting for
  // timeouts) and logged to NFLOG group nflog::kGroup (IPv6 neighbour discovery and MLD are dropped
  // quietly: both neighbour entries are pinned, and they would only be noise in the log), which
  // deskboxd reads into the sandbox's audit log. deskboxd's own connections to the guest's RFB and
  // CDP ports are the only traffic into the guest.
  return fmt::format(
      R"(table inet deskbox {{
  chain guard {{
    type filter hook prerouting priority -150; policy accept;
    iif != "tap0" accept
    meta l4proto tcp accept
    udp dport 53 accept
    icmpv6 type {{ nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert, mld-listener-report, mld2-listener-report }} drop
    counter limit rate 20/second burst 40 packets log prefix "refused" group {group}
    reject with icmpx type admin-prohibited
  }}
  chain prerouting {{
    type nat hook prerouting priority dstnat; policy accept;
    iif "tap0" meta nfproto ipv4 meta l4proto tcp dnat ip to {host4}:{tcp}
    iif "tap0" meta nfproto ipv6 meta l4proto tcp dnat ip6 to [{host6}]:{tcp}
    iif "tap0" meta nfproto ipv4 udp dport 53 dnat ip to {host4}:{dns}
    iif "tap0" meta nfproto ipv6 udp dport 53 dnat ip6 to [{host6}]:{dns}
  }}
  chain input {{
    type filter hook input priority 0; policy drop;
    iif "lo" accept
    ct state established,related accept
    iif "tap0" ct status dnat tcp dport {tcp} accept
    iif "tap0" ct status dnat udp dport {dns} accept
    iif "tap0" meta l4proto tcp reject with tcp reset
    iif "tap0" reject with icmpx type admin-prohibited
  }}
  chain forward {{
    type filter hook forward priority 0; policy drop;
    iif "tap0" reject with icmpx type admin-prohibited
  }}
  chain output {{
    type filter hook output priority 0; policy drop;
    oif "lo" accept
    ct state established,related accept
    oif "tap0" ip daddr {guest4} tcp dport {{ {rfb}, {cdp} }} accept
  }}
}}
)",
      fmt::arg("group", nflog::kGroup), fmt::arg("tcp", slot_network::kEgressProxyPort),
      fmt::arg("dns", slot_network::kEgressDnsPort), fmt::arg("host4", slot_network::kHostIPv4),
      fmt::arg("host6", slot_network::kHostIPv6), fmt::arg("guest4", slot_network::kGuestIPv4),
      fmt::arg("rfb", slot_network::kGuestRfbPort), fmt::arg("cdp", slot_network::kGuestCdpPort));
}

}  // namespace

JailerServer::JailerServer(JailerConfig config)
    : config_(std::move(config)), cgroups_(DetectCgroups(config_.cgroup_root, config_.cgroup_name)) {}

JailerServer::~JailerServer() = default;

std::string JailerServer::NetnsName(uint32_t slot) const {
  return fmt::format("{}{}", config_.netns_prefix, slot);
}
std::string JailerServer::SlotDir(uint32_t slot) const {
  return fmt::format("{}/slots/{}", config_.state_dir, slot);
}
std::string JailerServer::CgroupName(uint32_t slot) const { return NetnsName(slot); }

JailerServer::Reply JailerServer::Handle(const Request& request) {
  Reply reply;
  switch (request.kind_case()) {
    case Request::kCreateSlot: reply = CreateSlot(request.create_slot()); break;
    case Request::kLaunch: reply = Launch(request.launch()); break;
    case Request::kConnectSocket: reply = ConnectSocket(request.connect_socket()); break;
    case Request::kOpenNetnsSocket: reply = OpenNetnsSocket(request.open_netns_socket()); break;
    case Request::kDestroySlot: reply = DestroySlot(request.destroy_slot()); break;
    case Request::kListSlots: reply = ListSlots(); break;
    case Request::kOpenEgressSockets: reply = OpenEgressSockets(request.open_egress_sockets()); break;
    case Request::kOpenUplinkSockets: reply = OpenUplinkSockets(request.open_uplink_sockets()); break;
    case Request::kSetSlotPriority: reply = SetSlotPriority(request.set_slot_priority()); break;
    case Request::kSetSlotLimits: reply = SetSlotLimits(request.set_slot_limits()); break;
    case Request::kTrimTranslationCache: reply = TrimTranslationCache(request.trim_translation_cache()); break;
    default: reply = Fail(EINVAL, "unknown request");
  }
  reply.response.set_id(request.id());
  return reply;
}

JailerServer::Reply JailerServer::CreateSlot(const jailer::v1::CreateSlot& r) {
  if (r.slot() >= config_.max_slots) return Fail(EINVAL, fmt::format("slot {} out of range", r.slot()));
  std::string ns = NetnsName(r.slot());
  if (::access(("/run/netns/" + ns).c_str(), F_OK) == 0) return Ok();  // already there
  if (auto e = RunTool({"ip", "netns", "add", ns}); !e) return Fail(EIO, e.error());
  std::string batch = fmt::format(
      "link set lo up\n"
      "tuntap add dev tap0 mode tap vnet_hdr\n"
      "link set dev tap0 address 52:54:00:de:5b:01 mtu 1500 up\n"
      "addr add {host4}/{prefix4} dev tap0\n"
      "addr add {host6}/{prefix6} dev tap0 nodad\n"
      "neigh replace {guest4} lladdr {mac} dev tap0 nud permanent\n"
      "neigh replace {guest6} lladdr {mac} dev tap0 nud permanent\n",
      fmt::arg("host4", slot_network::kHostIPv4), fmt::arg("prefix4", slot_network::kPrefixLength4),
      fmt::arg("host6", slot_network::kHostIPv6), fmt::arg("prefix6", slot_network::kPrefixLength6),
      fmt::arg("guest4", slot_network::kGuestIPv4), fmt::arg("guest6", slot_network::kGuestIPv6),
      fmt::arg("mac", kGuestMac));
  auto cleanup_fail = [&](const std::string& why) {
    (void)RunTool({"ip", "netns", "del", ns});
    return Fail(EIO, fmt::format("setting up slot {}: {}", r.slot(), why));
  };
  if (auto e = RunTool({"ip", "-n", ns, "-batch", "-"}, batch); !e) return cleanup_fail(e.error());
  if (auto e = RunTool({"ip", "netns", "exec", ns, "nft", "-f", "-"}, NetnsRuleset()); !e)
    return cleanup_fail(e.error());
  log::Info(kJailerLog, "slot {} network ready ({})", r.slot(), ns);
  return Ok();
}

JailerServer::Reply JailerServer::ConnectSocket(const jailer::v1::ConnectSocket& r) {
  if (r.slot() >= config_.max_slots) return Fail(EINVAL, "slot out of range");
  const char* name = r.kind() == jailer::v1::QMP ? "qmp.sock" : r.kind() == jailer::v1::AGENT ? "agent.sock" : nullptr;
  if (!name) return Fail(EINVAL, "socket kind missing");
  std::string path = SlotDir(r.slot()) + "/" + name;
  UniqueFd s = ConnectUnix(path);
  if (!s) return Fail(errno, fmt::format("connect {}: {}", path, ErrnoString(errno)));
  Reply reply = Ok();
  reply.response.add_fd_roles(name);
  reply.fds.push_back(std::move(s));
  return reply;
}

JailerServer::Reply JailerServer::OpenNetnsSocket(const jailer::v1::OpenNetnsSocket& r) {
  if (r.slot() >= config_.max_slots) return Fail(EINVAL, "slot out of range");
  std::string ns_path = "/run/netns/" + NetnsName(r.slot());
  bool v6 = r.ipv6();
  auto s = InNetns(ns_path, [v6] {
    return UniqueFd(::socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  });
  if (!s) return Fail(s.error(), fmt::format("slot {} netns: {}", r.slot(), ErrnoString(s.error())));
  if (!*s) return Fail(errno, "socket");
  Reply reply = Ok();
  reply.response.add_fd_roles("socket");
  reply.fds.push_back(std::move(*s));
  return reply;
}

namespace {
// A socket bound to addr:port (and listening, for TCP) in the calling thread's netns.
std::expected<UniqueFd, std::string> BoundSocket(bool v6, bool udp, uint16_t port) {
  UniqueFd s(::socket(v6 ? AF_INET6 : AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s) return std::unexpected(fmt::format("socket: {}", ErrnoString(errno)));
  int one = 1;
  // TCP: rebind while old connections linger (a restarted deskboxd). Not UDP, where it would let
  // a second socket share the port.
  if (!udp) ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int rc;
  if (v6) {
    ::setsockopt(s.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_port = htons(port);
    ::inet_pton(AF_INET6, slot_network::kHostIPv6, &a.sin6_addr);
    rc = ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  } else {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, slot_network::kHostIPv4, &a.sin_addr);
    rc = ::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  if (rc != 0)
    return std::unexpected(fmt::format("bind {}:{}: {}",
                                       v6 ? slot_network::kHostIPv6 : slot_network::kHostIPv4, port,
                                       ErrnoString(errno)));
  if (!udp && ::listen(s.get(), 256) != 0) return std::unexpected(fmt::format("listen: {}", ErrnoString(errno)));
  return s;
}

// An NFLOG socket receiving the refused-packet log of the calling thread's netns.
std::expected<UniqueFd, std::string> NflogSocket() {
  UniqueFd s(::socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC | SOCK_NONBLOCK, NETLINK_NETFILTER));
  if (!s) return std::unexpected(fmt::format("netlink socket: {}", ErrnoString(errno)));
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (::bind(s.get(), reinterpret_cast<sockaddr*>(&local), sizeof local) != 0)
    return std::unexpected(fmt::format("netlink bind: {}", ErrnoString(errno)));
  int size = 1 << 20;  // bursts of refused packets are rate-limited by the rule, this absorbs the rest
  ::setsockopt(s.get(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
  // Each message is acknowledged by the kernel (NLM_F_ACK); an error code other than 0 fails.
  if (auto bound =
          nflog::BindGroup(s.get(), nflog::kGroup, nflog::kCopyRange, std::chrono::seconds(1));
      !bound)
    return std::unexpected(bound.error());
  return s;
}
}  // namespace

JailerServer::Reply JailerServer::OpenEgressSockets(const jailer::v1::OpenEgressSockets& r) {
  if (r.slot() >= config_.max_slots) return Fail(EINVAL, "slot out of range");
  std::string ns_path = "/run/netns/" + NetnsName(r.slot());
  if (::access(ns_path.c_str(), F_OK) != 0)
    return Fail(ENOENT, fmt::format("slot {} has no network (CreateSlot first)", r.slot()));
  struct Made {
    std::vector<std::pair<std::string, UniqueFd>> fds;
    std::string error;
  };
  auto made = InNetns(ns_path, [] {
    Made m;
    auto add = [&](const char* role, std::expected<UniqueFd, std::string> fd) {
      if (!m.error.empty()) return;
      if (!fd) m.error = fmt::format("{}: {}", role, fd.error());
      else m.fds.emplace_back(role, std::move(*fd));
    };
    add("tcp4", BoundSocket(false, false, slot_network::kEgressProxyPort));
    add("tcp6", BoundSocket(true, false, slot_network::kEgressProxyPort));
    add("udp4", BoundSocket(false, true, slot_network::kEgressDnsPort));
    add("udp6", BoundSocket(true, true, slot_network::kEgressDnsPort));
    add("nflog", NflogSocket());
    return m;
  });
  if (!made) return Fail(made.error(), fmt::format("slot {} netns: {}", r.slot(), ErrnoString(made.error())));
  if (!made->error.empty()) return Fail(EIO, fmt::format("slot {} egress sockets: {}", r.slot(), made->error));
  Reply reply = Ok();
  for (auto& [role, fd] : made->fds) {
    reply.response.add_fd_roles(role);
    reply.fds.push_back(std::move(fd));
  }
  return reply;
}

JailerServer::Reply JailerServer::OpenUplinkSockets(const jailer::v1::OpenUplinkSockets& r) {
  if (r.count() == 0 || r.count() > kMaxDatagramFds) return Fail(EINVAL, fmt::format("count must be 1..{}", kMaxDatagramFds));
  bool v6 = r.ipv6(), udp = r.udp();
  uint32_t count = r.count();
  auto make = [v6, udp, count] {
    std::vector<UniqueFd> fds;
    for (uint32_t i = 0; i < count; ++i) {
      UniqueFd s(::socket(v6 ? AF_INET6 : AF_INET, (udp ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
      if (!s) break;
      fds.push_back(std::move(s));
    }
    return fds;
  };
  std::vector<UniqueFd> fds;
  if (config_.uplink_netns.empty()) {
    fds = make();
  } else {
    auto in = InNetns("/run/netns/" + config_.uplink_netns, make);
    if (!in) return Fail(in.error(), fmt::format("uplink netns {}: {}", config_.uplink_netns, ErrnoString(in.error())));
    fds = std::move(*in);
  }
  if (fds.empty()) return Fail(errno ? errno : EIO, fmt::format("uplink socket: {}", ErrnoString(errno)));
  Reply reply = Ok();
  for (auto& fd : fds) {
    reply.response.add_fd_roles("socket");
    reply.fds.push_back(std::move(fd));
  }
  return reply;
}

JailerServer::Reply JailerServer::SetSlotPriority(const jailer::v1::SetSlotPriority& r) {
  if (r.slot() >= config_.max_slots) return Fail(EINVAL, "slot out of range");
  auto it = slots_.find(r.slot());
  if (it == slots_.end() || !ProcessAlive(it->second.qemu_pid))
    return Fail(ESRCH, fmt::format("slot {} runs no QEMU", r.slot()));
  // Nice is per thread on Linux: set it on each of QEMU's threads (vCPUs included).
  const int nice = r.background() ? 10 : 0;
  std::error_code ec;
  int changed = 0;
  for (const auto& task : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", it->second.qemu_pid), ec)) {
    pid_t tid = static_cast<pid_t>(std::atoi(task.path().filename().c_str()));
    if (tid > 0 && ::setpriority(PRIO_PROCESS, static_cast<id_t>(tid), nice) == 0) ++changed;
  }
  if (changed == 0) return Fail(ESRCH, fmt::format("slot {}: no QEMU thread to set", r.slot()));
  return Ok();
}

JailerServer::Reply JailerServer::SetSlotLimits(const jailer::v1::SetSlotLimits& r) {
  if (r.slot() >= config_.max_slots) return Fail(EINVAL, "slot out of range");
  auto it = slots_.find(r.slot());
  if (it == slots_.end() || !ProcessAlive(it->second.qemu_pid))
    return Fail(ESRCH, fmt::format("slot {} runs no QEMU", r.slot()));
  // The cap never passes the slot's vCPUs (what Launch set): a guest cannot use more.
  const uint32_t vcpus = it->second.smp ? it->second.smp : std::max(1u, std::thread::hardware_concurrency());
  if (r.cpu_max_millis() > vcpus * 1000)
    return Fail(EINVAL, fmt::format("cpu max {} thousandths is more than the slot's {} vCPUs", r.cpu_max_millis(), vcpus));
  if (auto e = cgroups_->SetCpu(CgroupName(r.slot()), {.weight = r.cpu_weight(), .max_millis = r.cpu_max_millis()}); !e)
    return Fail(EINVAL, e.error());
  return Ok();
}

namespace {

// KiB in memory of a QEMU's translation cache (its anonymous read/write/execute mappings, from
// /proc/PID/smaps), and whether the trim plugin is loaded into it (mapped from `plugin`).
struct CacheState {
  bool plugin = false;
  uint64_t resident_kib = 0;
};

CacheState ReadCacheState(pid_t pid, const std::string& plugin) {
  CacheState st;
  auto smaps = ReadFile(fmt::format("/proc/{}/smaps", pid), 64 << 20);
  if (!smaps) return st;
  for (const auto& m : ParseSmaps(*smaps)) {
    if (m.perms == "rwxp" && m.anonymous()) st.resident_kib += m.rss_kib;
    if (!plugin.empty() && m.path == plugin) st.plugin = true;
  }
  return st;
}

}  // namespace

JailerServer::Reply JailerServer::TrimTranslationCache(const jailer::v1::TrimTranslationCache& r) {
  if (r.slot() >= config_.max_slots) return Fail(EINVAL, "slot out of range");
  auto it = slots_.find(r.slot());
  if (it == slots_.end() || !ProcessAlive(it->second.qemu_pid))
    return Fail(ESRCH, fmt::format("slot {} runs no QEMU", r.slot()));
  pid_t pid = it->second.qemu_pid;
  Reply reply = Ok();
  auto* result = reply.response.mutable_trim();
  // Only a QEMU that loaded the plugin has a handler for the signal: to any other it is fatal.
  CacheState st = ReadCacheState(pid, config_.tcg_trim_plugin);
  result->set_resident_before_kib(st.resident_kib);
  if (!st.plugin) return reply;  // KVM, or no plugin: nothing to do
  if (r.above_kib() > 0 && st.resident_kib <= r.above_kib()) return reply;  // small enough
  if (::kill(pid, SIGUSR2) != 0)
    return Fail(errno,
                fmt::format("slot {}: signalling its QEMU: {}", r.slot(), ErrnoString(errno)));
  result->set_trimmable(true);
  return reply;
}

void JailerServer::KillSlotQemu(uint32_t slot) {
  pid_t pid = 0;
  if (auto it = slots_.find(slot); it != slots_.end()) pid = it->second.qemu_pid;
  if (pid == 0) {
    auto s = ReadFile(SlotDir(slot) + "/qemu.pid", 64);
    if (s) pid = std::atoi(s->c_str());
  }
  if (pid <= 0) return;
  // Only kill what is really this slot's QEMU (a stale pid file may name another process).
  auto cmdline = ReadFile(fmt::format("/proc/{}/cmdline", pid), 1 << 16);
  if (!cmdline || cmdline->find(fmt::format("deskbox-slot{},", slot)) == std::string::npos) return;
  ::kill(pid, SIGKILL);
  if (::waitpid(pid, nullptr, 0) != pid) {
    for (int i = 0; i < 500 && ::kill(pid, 0) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(4));
  }
}

JailerServer::Reply JailerServer::DestroySlot(const jailer::v1::DestroySlot& r) {
  uint32_t slot = r.slot();
  if (slot >= config_.max_slots) return Fail(EINVAL, "slot out of range");
  bool exited_by_itself = slots_.count(slot) && slots_[slot].qemu_pid == 0 &&
                          ::access((SlotDir(slot) + "/qemu.pid").c_str(), F_OK) == 0;
  KillSlotQemu(slot);
  slots_.erase(slot);
  // What a QEMU that died by itself said is lost with the slot directory: keep its last words.
  if (exited_by_itself) {
    if (std::string tail = TailOf(SlotDir(slot) + "/qemu.log", 800); !tail.empty())
      log::Warn(kJailerLog, "slot {}: QEMU had exited; qemu.log: {}", slot, tail);
  }
  std::string errors;
  if (auto e = cgroups_->Remove(CgroupName(slot)); !e) errors += e.error() + "; ";
  std::string ns = NetnsName(slot);
  if (::access(("/run/netns/" + ns).c_str(), F_OK) == 0) {
    if (auto e = RunTool({"ip", "netns", "del", ns}); !e) errors += e.error() + "; ";
  }
  if (auto e = RemoveTree(SlotDir(slot)); !e) errors += "removing slot dir: " + ErrnoString(e.error());
  if (!errors.empty()) return Fail(EIO, errors);
  log::Info(kJailerLog, "slot {} destroyed", slot);
  return Ok();
}

JailerServer::Reply JailerServer::ListSlots() {
  Reply reply = Ok();
  auto* list = reply.response.mutable_slots();
  // A slot is its network namespace or its directory: after a reboot the namespaces are gone
  // but the directories (in the state directory, on disk) are not, and must still be reclaimed.
  std::set<uint32_t> found;
  auto add = [&](const std::string& num) {
    if (num.empty() || num.size() > 9 || num.find_first_not_of("0123456789") != std::string::npos)
      return;
    if (uint32_t slot = static_cast<uint32_t>(std::stoul(num)); slot < config_.max_slots)
      found.insert(slot);
  };
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/run/netns", ec)) {
    std::string name = entry.path().filename().string();
    if (name.starts_with(config_.netns_prefix)) add(name.substr(config_.netns_prefix.size()));
  }
  for (const auto& entry : std::filesystem::directory_iterator(config_.state_dir + "/slots", ec))
    add(entry.path().filename().string());
  for (uint32_t slot : found) {
    auto* info = list->add_slots();
    info->set_slot(slot);
    pid_t pid = 0;
    if (auto it = slots_.find(slot); it != slots_.end()) {
      pid = it->second.qemu_pid;
      info->set_template_name(it->second.template_name);
    } else if (auto s = ReadFile(SlotDir(slot) + "/qemu.pid", 64)) {
      pid = std::atoi(s->c_str());
      auto cmdline = ReadFile(fmt::format("/proc/{}/cmdline", pid), 1 << 16);
      if (!cmdline || cmdline->find(fmt::format("deskbox-slot{},", slot)) == std::string::npos) pid = 0;
    }
    info->set_qemu_pid(ProcessAlive(pid) ? pid : 0);
  }
  return reply;
}

void JailerServer::ReapChildren() {
  for (;;) {
    int status;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (auto& [slot, s] : slots_) {
      if (s.qemu_pid == pid) {
        log::Warn(kJailerLog, "slot {}: QEMU pid {} exited (status {:#x})", slot, pid, status);
        s.qemu_pid = 0;
      }
    }
  }
}

int JailerServer::Run() {
  if (::geteuid() != 0) {
    log::Error(kJailerLog, "must run as root");
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  UniqueFd sigfd(::signalfd(-1, &mask, SFD_CLOEXEC));

  std::string dir = std::filesystem::path(config_.socket_path).parent_path().string();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::filesystem::create_directories(config_.state_dir + "/slots", ec);
  if (ec) {
    log::Error(kJailerLog, "creating {}/slots: {}", config_.state_dir, ec.message());
    return 1;
  }
  if (!config_.tcg_trim_plugin.empty()) {
    if (::access(config_.tcg_trim_plugin.c_str(), R_OK) != 0) {
      log::Warn(kJailerLog, "{}: {}; idle sandboxes keep their translation cache",
                config_.tcg_trim_plugin, ErrnoString(errno));
      config_.tcg_trim_plugin.clear();
    } else if (auto ok = CheckTcgTrimPlugin(config_.qemu_binary, config_.tcg_trim_plugin); !ok) {
      log::Warn(kJailerLog, "{} does not load {}: {}; idle sandboxes keep their translation cache",
                config_.qemu_binary, config_.tcg_trim_plugin, ok.error());
      config_.tcg_trim_plugin.clear();
    }
  }
  // QEMUs that a jailer before this one started run on (they outlive it): this one takes them
  // as its own, so that trimming and destroying them work as for those it starts.
  Reply found = ListSlots();  // named: a range over a temporary's member would dangle
  for (const auto& s : found.response.slots().slots()) {
    if (s.qemu_pid() <= 0) continue;
    slots_[s.slot()] = Slot{static_cast<pid_t>(s.qemu_pid()), ""};
    log::Info(kJailerLog, "slot {}: QEMU pid {} runs on from before this jailer", s.slot(), s.qemu_pid());
  }
  ::unlink(config_.socket_path.c_str());
  UniqueFd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (config_.socket_path.size() >= sizeof addr.sun_path) {
    log::Error(kJailerLog, "socket path too long: {}", config_.socket_path);
    return 1;
  }
  std::strncpy(addr.sun_path, config_.socket_path.c_str(), sizeof addr.sun_path - 1);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener.get(), 16) != 0) {
    log::Error(kJailerLog, "listen on {}: {}", config_.socket_path, ErrnoString(errno));
    return 1;
  }
  ::chown(config_.socket_path.c_str(), 0, config_.socket_gid);
  ::chmod(config_.socket_path.c_str(), config_.socket_gid ? 0660 : 0600);
  if (config_.client_uid != 0) ::chown(config_.socket_path.c_str(), config_.client_uid, config_.socket_gid);
  log::Info(kJailerLog, "listening on {} (cgroup {}, slots uid {}+)", config_.socket_path,
            cgroups_->version(), config_.uid_base);

  std::vector<UniqueFd> clients;
  for (;;) {
    std::vector<pollfd> fds = {{sigfd.get(), POLLIN, 0}, {listener.get(), POLLIN, 0}};
    for (auto& c : clients) fds.push_back({c.get(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      log::Error(kJailerLog, "poll: {}", ErrnoString(errno));
      return 1;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo si;
      if (::read(sigfd.get(), &si, sizeof si) == sizeof si) {
        if (si.ssi_signo == SIGCHLD) {
          ReapChildren();
        } else {
          ::unlink(config_.socket_path.c_str());
          if (!config_.sweep_on_exit) {
            auto live = ListSlots();
            if (live.response.slots().slots().empty()) {
              // Nothing for a successor to adopt: leave no empty cgroups behind.
              if (auto r = cgroups_->RemoveSubtree(); !r) log::Warn(kJailerLog, "removing the cgroup subtree: {}", r.error());
              log::Info(kJailerLog, "signal {}: exiting (no slots were live)", si.ssi_signo);
            } else {
              log::Info(kJailerLog, "signal {}: exiting ({} QEMU processes keep running)", si.ssi_signo,
                        live.response.slots().slots().size());
            }
            return 0;
          }
          log::Info(kJailerLog, "signal {}: destroying every slot, then exiting", si.ssi_signo);
          auto list = ListSlots();
          for (const auto& s : list.response.slots().slots()) {
            jailer::v1::DestroySlot d;
            d.set_slot(s.slot());
            DestroySlot(d);
          }
          if (auto r = cgroups_->RemoveSubtree(); !r) log::Warn(kJailerLog, "removing the cgroup subtree: {}", r.error());
          return 0;
        }
      }
    }
    if (fds[1].revents & POLLIN) {
      UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      ucred cred{};
      socklen_t len = sizeof cred;
      if (c && ::getsockopt(c.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
          (cred.uid == 0 || cred.uid == config_.client_uid)) {
        clients.push_back(std::move(c));
      } else if (c) {
        log::Warn(kJailerLog, "refused a client with uid {}", cred.uid);
      }
    }
    for (size_t i = 2; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      UniqueFd& c = clients[i - 2];
      auto d = RecvDatagram(c.get());
      if (!d) {
        if (d.error() != EAGAIN) c.reset();
        continue;
      }
      Request req;
      Reply reply;
      if (!d->fds.empty() || !req.ParseFromString(d->bytes)) {
        reply = Fail(EINVAL, "malformed request");
      } else {
        reply = Handle(req);
      }
      if (!reply.response.ok()) log::Warn(kJailerLog, "request {} failed: {}", req.id(), reply.response.error());
      std::vector<int> raw;
      for (auto& f : reply.fds) raw.push_back(f.get());
      if (!SendDatagram(c.get(), reply.response.SerializeAsString(), raw)) c.reset();
    }
    std::erase_if(clients, [](const UniqueFd& c) { return !c.valid(); });
  }
}

}  // namespace deskbox::vmhost
