#pragma once
// Builds QEMU command lines for microvm sandboxes. Pure functions (but CheckTcgTrimPlugin, which
// runs QEMU once): unit-tested, and the only place that knows QEMU's flags. The device list is
// identical for boot and restore (the snapshot's device state must find the same devices); only the
// RAM backend's sharing, the kernel (boot only: at restore the guest is already in RAM) and
// -incoming differ.
#include <cstdint>
#include <expected>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deskbox::vmhost {

struct BootFiles {
  std::string kernel;
  std::string initrd;
  std::string append;
};

// Nehalem (SSE4.2, no AVX: cheap under TCG) with RDRAND, which TCG emulates from the host's
// getrandom(). BoringSSL mixes RDRAND into every RAND_bytes call on Intel CPUs that have it, so
// Chromium's processes restored from one snapshot draw different random bytes at once
// (docs/guest.md, "Random state after restore"). ARAT (the APIC timer keeps running in idle)
// lets the guest kernel stop its tick while idle; without it an idle guest took 250 timer
// interrupts a second per vCPU (docs/guest.md, "The idle guest does not tick").
inline constexpr std::string_view kDefaultCpuModel = "Nehalem,+rdrand,+arat";

// TCG's translation cache, per QEMU. A restore's browser refresh (a new renderer) translates
// ~280 MiB of host code: with 64 MiB the cache was flushed 11 times in one restore and every
// code path translated again, which made the refresh 1.5-2x slower and a warm sandbox answer its
// first RFB and CDP connections 4-6x slower (docs/design.md, docs/benchmarks.md). Only the part
// in use is resident. KVM ignores it.
inline constexpr uint32_t kDefaultTbSizeMib = 512;
inline constexpr uint32_t kMinTbSizeMib = 16;
inline constexpr uint32_t kMaxTbSizeMib = 2048;

struct QemuSpec {
  std::string binary = "qemu-system-x86_64";
  std::string name;                 // shown in ps
  std::string accelerator = "tcg";  // "kvm" or "tcg" (already resolved)
  uint32_t tb_size_mib = kDefaultTbSizeMib;  // TCG translation cache bound
  std::string cpu_model = std::string(kDefaultCpuModel);
  uint32_t smp = 2;
  uint64_t memory_mib = 2048;
  std::string ram_path;
  bool ram_writable_shared = false;  // template build: share=on; restore: private, read-only file
  std::string disk_path;
  std::string disk_format = "qcow2";
  std::optional<BootFiles> boot;     // cold boot only
  std::string qmp_socket;
  std::string agent_socket;
  std::string console_log;
  int tap_fd = 3;
  bool incoming_defer = false;
  bool seccomp = true;
  // Under TCG: the plugin that trims an idle sandbox's translation cache
  // (vmhost/src/tcg_trim_plugin.cc), loaded with the cache's size; empty: none.
  std::string tcg_trim_plugin;
};

inline constexpr char kGuestMac[] = "52:54:00:de:5b:02";
inline constexpr char kAgentPortName[] = "org.deskbox.agent";

std::vector<std::string> BuildQemuArgv(const QemuSpec& spec);

// Whether `qemu_binary` loads the translation-cache plugin (QEMU refuses a plugin built for
// another plugin API, and would then refuse to start every sandbox): starts it once with no
// machine and the plugin, and quits it over QMP. The error says what QEMU said.
std::expected<void, std::string> CheckTcgTrimPlugin(const std::string& qemu_binary,
                                                    const std::string& plugin);

// "kvm" when the CPU has hardware virtualisation (vmx/svm in /proc/cpuinfo flags) and /dev/kvm
// can be opened; "tcg" otherwise. `requested` may be "auto", "kvm" or "tcg".
std::string ResolveAccelerator(std::string_view requested, std::string_view cpuinfo,
                               bool kvm_device_usable);
std::string ResolveAcceleratorOnHost(std::string_view requested);

// True for a QEMU -cpu value this project passes on: a model name ([A-Za-z0-9._-]{1,48}) and
// then features switched on or off (",+name" / ",-name", name [a-z0-9._-]{1,32}), at most 16,
// nothing else (no "=" properties, no empty items).
bool IsValidCpuModel(std::string_view model);

// The rate of the host's TSC in kHz, from two readings 200 ms apart against CLOCK_MONOTONIC_RAW,
// measured once per process; 0 where it cannot be measured or comes out implausible. Under TCG
// the guest's TSC is the host's, and a guest kernel told this rate (tsc_early_khz=) does not
// calibrate it against the emulated PIT, which fails when the host is busy and then hangs the
// boot.
uint32_t HostTscKhz();

// True for names safe to use as one path component: [A-Za-z0-9._@-]{1,128}, not "." or "..".
bool IsSafeName(std::string_view name);

}  // namespace deskbox::vmhost
