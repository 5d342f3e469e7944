#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "vmhost/qemu_command.h"

namespace deskbox::vmhost {
namespace {

std::string ValueAfter(const std::vector<std::string>& argv, const std::string& flag, int nth = 0) {
  for (size_t i = 0; i + 1 < argv.size(); ++i)
    if (argv[i] == flag && nth-- == 0) return argv[i + 1];
  return "";
}
bool Has(const std::vector<std::string>& argv, const std::string& s) {
  return std::find(argv.begin(), argv.end(), s) != argv.end();
}

QemuSpec Base() {
  QemuSpec s;
  s.name = "deskbox-slot3";
  s.ram_path = "/t/ram";
  s.disk_path = "/s/overlay.qcow2";
  s.qmp_socket = "/s/qmp.sock";
  s.agent_socket = "/s/agent.sock";
  s.console_log = "/s/console.log";
  return s;
}

TEST(QemuCommand, RestoreMapsTemplateRamReadOnlyPrivate) {
  QemuSpec s = Base();
  s.incoming_defer = true;
  auto argv = BuildQemuArgv(s);
  std::string mem = ValueAfter(argv, "-object");
  EXPECT_NE(mem.find("mem-path=/t/ram"), std::string::npos);
  EXPECT_NE(mem.find("share=off"), std::string::npos);
  EXPECT_NE(mem.find("readonly=on"), std::string::npos);
  EXPECT_NE(mem.find("rom=off"), std::string::npos);
  EXPECT_EQ(ValueAfter(argv, "-incoming"), "defer");
  EXPECT_FALSE(Has(argv, "-kernel")) << "a restore must not load a kernel into the mapped RAM";
  EXPECT_NE(ValueAfter(argv, "-sandbox").find("spawn=deny"), std::string::npos);
  EXPECT_EQ(ValueAfter(argv, "-bios"), "/usr/share/qemu/qboot.rom");
}

TEST(QemuCommand, BootWritesRamToSharedFile) {
  QemuSpec s = Base();
  s.ram_writable_shared = true;
  s.boot = BootFiles{"/i/vmlinuz", "/i/initrd.img", "root=/dev/vda"};
  auto argv = BuildQemuArgv(s);
  std::string mem = ValueAfter(argv, "-object");
  EXPECT_NE(mem.find("share=on"), std::string::npos);
  EXPECT_EQ(mem.find("readonly"), std::string::npos);
  EXPECT_EQ(ValueAfter(argv, "-kernel"), "/i/vmlinuz");
  EXPECT_FALSE(Has(argv, "-incoming"));
}

TEST(QemuCommand, DevicesAreIdenticalForBootAndRestore) {
  QemuSpec boot = Base();
  boot.ram_writable_shared = true;
  boot.boot = BootFiles{"k", "i", "a"};
  QemuSpec restore = Base();
  restore.incoming_defer = true;
  auto devices = [](const std::vector<std::string>& argv) {
    std::vector<std::string> d;
    for (size_t i = 0; i + 1 < argv.size(); ++i)
      if (argv[i] == "-device" || argv[i] == "-M" || argv[i] == "-cpu" || argv[i] == "-smp" || argv[i] == "-m")
        d.push_back(argv[i] + " " + argv[i + 1]);
    return d;
  };
  EXPECT_EQ(devices(BuildQemuArgv(boot)), devices(BuildQemuArgv(restore)));
}

TEST(QemuCommand, AcceleratorFlags) {
  QemuSpec s = Base();
  s.accelerator = "tcg";
  s.tb_size_mib = 64;
  EXPECT_EQ(ValueAfter(BuildQemuArgv(s), "-accel"), "tcg,tb-size=64");
  s.accelerator = "kvm";
  EXPECT_EQ(ValueAfter(BuildQemuArgv(s), "-accel"), "kvm");
}

TEST(QemuCommand, TrimPluginIsLoadedWithTheCacheSizeUnderTcgOnly) {
  QemuSpec s = Base();
  s.accelerator = "tcg";
  s.tb_size_mib = 64;
  EXPECT_FALSE(Has(BuildQemuArgv(s), "-plugin"));
  s.tcg_trim_plugin = "/p/libdeskbox-tcgtrim.so";
  EXPECT_EQ(ValueAfter(BuildQemuArgv(s), "-plugin"),
            "file=/p/libdeskbox-tcgtrim.so,bytes=67108864");
  s.accelerator = "kvm";
  EXPECT_FALSE(Has(BuildQemuArgv(s), "-plugin")) << "KVM has no translation cache";
}

TEST(QemuCommand, ResolveAccelerator) {
  std::string with_vmx = "processor : 0\nflags : fpu vme sse2 vmx ept\n";
  std::string without = "processor : 0\nflags : fpu vme sse2 hypervisor\n";
  EXPECT_EQ(ResolveAccelerator("auto", with_vmx, true), "kvm");
  EXPECT_EQ(ResolveAccelerator("auto", with_vmx, false), "tcg");
  EXPECT_EQ(ResolveAccelerator("auto", without, true), "tcg");
  EXPECT_EQ(ResolveAccelerator("auto", "flags : svm\n", true), "kvm");
  EXPECT_EQ(ResolveAccelerator("tcg", with_vmx, true), "tcg");
}

TEST(QemuCommand, SafeNames) {
  EXPECT_TRUE(IsSafeName("desktop@0123abcd"));
  EXPECT_FALSE(IsSafeName(""));
  EXPECT_FALSE(IsSafeName(".."));
  EXPECT_FALSE(IsSafeName("a/b"));
  EXPECT_FALSE(IsSafeName("a b"));
  EXPECT_FALSE(IsSafeName(std::string(200, 'a')));
}

TEST(QemuCommand, CpuModels) {
  EXPECT_TRUE(IsValidCpuModel(kDefaultCpuModel));
  EXPECT_TRUE(IsValidCpuModel("Nehalem"));
  EXPECT_TRUE(IsValidCpuModel("host"));
  EXPECT_TRUE(IsValidCpuModel("Skylake-Client-v4,+rdrand,-spec-ctrl"));
  EXPECT_FALSE(IsValidCpuModel(""));
  EXPECT_FALSE(IsValidCpuModel(",+rdrand"));
  EXPECT_FALSE(IsValidCpuModel("Nehalem,"));
  EXPECT_FALSE(IsValidCpuModel("Nehalem,rdrand"));            // a bare feature
  EXPECT_FALSE(IsValidCpuModel("Nehalem,+"));
  EXPECT_FALSE(IsValidCpuModel("Nehalem,+rdrand,,+aes"));
  EXPECT_FALSE(IsValidCpuModel("Nehalem,rdrand=on"));         // no properties
  EXPECT_FALSE(IsValidCpuModel("Nehalem,+RDRAND"));
  EXPECT_FALSE(IsValidCpuModel("Nehalem -enable-kvm"));
  EXPECT_FALSE(IsValidCpuModel(std::string(49, 'N')));
  std::string many = "Nehalem";
  for (int i = 0; i < 17; ++i) many += ",+f" + std::to_string(i);
  EXPECT_FALSE(IsValidCpuModel(many));
  QemuSpec s;
  auto argv = BuildQemuArgv(s);
  auto it = std::find(argv.begin(), argv.end(), "-cpu");
  ASSERT_NE(it, argv.end());
  EXPECT_EQ(*std::next(it), "Nehalem,+rdrand,+arat");
}

TEST(QemuCommand, HostTscRateIsMeasuredOnceAndPlausible) {
  uint32_t khz = HostTscKhz();
#if defined(__x86_64__)
  // Every x86-64 host this runs on has a TSC between 100 MHz and 10 GHz.
  EXPECT_GE(khz, 100'000u);
  EXPECT_LE(khz, 10'000'000u);
  // The kernel's own figure, where /proc/cpuinfo gives one, is within 2% (cpufreq may lower
  // "cpu MHz" below the TSC's rate, never raise it far above).
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  ASSERT_NE(f, nullptr);
  char line[256];
  double mhz = 0;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "cpu MHz : %lf", &mhz) == 1 || std::sscanf(line, "cpu MHz\t: %lf", &mhz) == 1) break;
  std::fclose(f);
  if (mhz > 0) {
    EXPECT_LE(mhz * 1000, khz * 1.02) << "cpu MHz " << mhz << ", measured " << khz << " kHz";
  }
#endif
  EXPECT_EQ(HostTscKhz(), khz) << "measured once per process";
}

}  // namespace
}  // namespace deskbox::vmhost
