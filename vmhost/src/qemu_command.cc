#include "vmhost/qemu_command.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "common/files.h"
#include "common/process.h"

namespace deskbox::vmhost {
namespace {

// -plugin's value for the translation-cache trim plugin: it finds the cache by its size.
std::string TrimPluginOption(const std::string& plugin, uint32_t tb_size_mib) {
  return fmt::format("file={},bytes={}", plugin, uint64_t{tb_size_mib} << 20);
}

}  // namespace

std::vector<std::string> BuildQemuArgv(const QemuSpec& s) {
  std::vector<std::string> a = {s.binary};
  auto add = [&a](std::initializer_list<std::string> xs) { a.insert(a.end(), xs); };
  add({"-name", fmt::format("{},debug-threads=on", s.name)});
  // microvm needs qboot with QEMU 10: its default SeaBIOS overwrites the top of RAM where the
  // initrd sits.
  add({"-M", "microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem"});
  add({"-bios", "/usr/share/qemu/qboot.rom"});
  if (s.accelerator == "kvm") {
    add({"-accel", "kvm"});
  } else {
    add({"-accel", fmt::format("tcg,tb-size={}", s.tb_size_mib)});
    if (!s.tcg_trim_plugin.empty()) add({"-plugin", TrimPluginOption(s.tcg_trim_plugin, s.tb_size_mib)});
  }
  add({"-cpu", s.cpu_model});
  add({"-smp", std::to_string(s.smp)});
  add({"-m", fmt::format("{}M", s.memory_mib)});
  if (s.ram_writable_shared) {
    add({"-object", fmt::format("memory-backend-file,id=mem,size={}M,mem-path={},share=on",
                                s.memory_mib, s.ram_path)});
  } else {
    // Copy-on-write view of the template's RAM file: the file is opened read-only, pages are
    // shared with every other clone through the page cache until the guest writes them.
    add({"-object",
         fmt::format("memory-backend-file,id=mem,size={}M,mem-path={},share=off,readonly=on,rom=off",
                     s.memory_mib, s.ram_path)});
  }
  add({"-nodefaults", "-no-user-config", "-display", "none", "-msg", "timestamp=on"});
  add({"-serial", fmt::format("file:{}", s.console_log)});
  if (s.boot) {
    add({"-kernel", s.boot->kernel, "-initrd", s.boot->initrd, "-append", s.boot->append});
  }
  add({"-drive", fmt::format("id=root,file={},format={},if=none,cache=writeback,discard=unmap",
                             s.disk_path, s.disk_format)});
  add({"-device", "virtio-blk-device,drive=root"});
  add({"-netdev", fmt::format("tap,id=net0,fd={}", s.tap_fd)});
  add({"-device", fmt::format("virtio-net-device,netdev=net0,mac={}", kGuestMac)});
  add({"-device", "virtio-serial-device,max_ports=2"});
  add({"-chardev", fmt::format("socket,id=agent,path={},server=on,wait=off", s.agent_socket)});
  add({"-device", fmt::format("virtserialport,chardev=agent,name={}", kAgentPortName)});
  add({"-qmp", fmt::format("unix:{},server=on,wait=off", s.qmp_socket)});
  if (s.seccomp) {
    add({"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"});
  }
  if (s.incoming_defer) add({"-incoming", "defer"});
  return a;
}

std::expected<void, std::string> CheckTcgTrimPlugin(const std::string& qemu_binary,
                                                    const std::string& plugin) {
  std::vector<std::string> argv = {qemu_binary, "-M", "none",
                                   "-accel", fmt::format("tcg,tb-size={}", kDefaultTbSizeMib),
                                   "-plugin", TrimPluginOption(plugin, kDefaultTbSizeMib),
                                   "-nodefaults", "-no-user-config", "-display", "none",
                                   "-qmp", "stdio"};
  auto r = RunCommand(argv, "{\"execute\": \"qmp_capabilities\"}\n{\"execute\": \"quit\"}\n",
                      std::chrono::seconds(20));
  if (!r) return std::unexpected(fmt::format("{}: {}", qemu_binary, std::strerror(r.error())));
  if (!r->ok()) {
    // QEMU's own words come last, after any QMP greeting.
    std::string said = r->output.substr(r->output.size() > 400 ? r->output.size() - 400 : 0);
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    return std::unexpected(r->timed_out ? fmt::format("{} did not quit within 20 s", qemu_binary)
                                        : said);
  }
  return {};
}

bool IsValidCpuModel(std::string_view model) {
  auto word = [](std::string_view w, size_t max, bool upper) {
    if (w.empty() || w.size() > max) return false;
    for (char c : w) {
      bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
                (upper && c >= 'A' && c <= 'Z');
      if (!ok) return false;
    }
    return true;
  };
  size_t comma = model.find(',');
  if (!word(model.substr(0, comma), 48, true)) return false;
  int features = 0;
  while (comma != std::string_view::npos) {
    model.remove_prefix(comma + 1);
    comma = model.find(',');
    std::string_view item = model.substr(0, comma);
    if (item.size() < 2 || (item[0] != '+' && item[0] != '-') || !word(item.substr(1), 32, false)) return false;
    if (++features > 16) return false;
  }
  return true;
}

std::string ResolveAccelerator(std::string_view requested, std::string_view cpuinfo,
                               bool kvm_device_usable) {
  if (requested == "kvm" || requested == "tcg") return std::string(requested);
  bool hw = false;
  size_t pos = 0;
  while ((pos = cpuinfo.find("flags", pos)) != std::string_view::npos) {
    size_t end = cpuinfo.find('\n', pos);
    std::string_view line = cpuinfo.substr(pos, end == std::string_view::npos ? end : end - pos);
    if (line.find(" vmx") != std::string_view::npos || line.find(" svm") != std::string_view::npos)
      hw = true;
    pos = end == std::string_view::npos ? cpuinfo.size() : end;
  }
  return hw && kvm_device_usable ? "kvm" : "tcg";
}

std::string ResolveAcceleratorOnHost(std::string_view requested) {
  auto cpuinfo = ReadFile("/proc/cpuinfo", 4 << 20);
  int fd = ::open("/dev/kvm", O_RDWR | O_CLOEXEC);
  bool usable = fd >= 0;
  if (fd >= 0) ::close(fd);
  return ResolveAccelerator(requested, cpuinfo ? *cpuinfo : std::string(), usable);
}

bool IsSafeName(std::string_view name) {
  if (name.empty() || name.size() > 128 || name == "." || name == "..") return false;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '@';
    if (!ok) return false;
  }
  return true;
}

uint32_t HostTscKhz() {
  static const uint32_t khz = [] {
#if defined(__x86_64__)
    auto now_ns = [] {
      timespec t{};
      ::clock_gettime(CLOCK_MONOTONIC_RAW, &t);
      return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
    };
    double t0 = now_ns();
    uint64_t c0 = __rdtsc();
    ::usleep(200'000);
    uint64_t c1 = __rdtsc();
    double t1 = now_ns();
    double measured = static_cast<double>(c1 - c0) / (t1 - t0) * 1e6;
    if (measured >= 100'000 && measured <= 10'000'000) return static_cast<uint32_t>(std::lround(measured));
#endif
    return uint32_t{0};
  }();
  return khz;
}

}  // namespace deskbox::vmhost
