#pragma once
// Builds a template: cold-boots the image in a jailed QEMU with its RAM in a shared file, waits
// until the agent reports the desktop ready and the guest idle, then snapshots (stop, migrate the
// device state to a file with x-ignore-shared, quit) and seals the directory read-only with its
// manifest. Runs as root (it renames and chowns the finished files); QEMU still runs jailed.
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <expected>
#include <string>

#include "vmhost/jailer_client.h"
#include "vmhost/qemu_command.h"

namespace deskbox::vmhost {

struct TemplateBuildOptions {
  std::string cache_dir = "/var/cache/deskbox";
  std::string image_name;         // directory under <cache>/images
  std::string name = "desktop";
  uint32_t screen_width = 1280, screen_height = 800;
  uint32_t smp = 2;
  uint64_t memory_mib = 2048;
  std::string cpu_model = std::string(kDefaultCpuModel);
  std::string accelerator = "auto";
  uint32_t tb_size_mib = kDefaultTbSizeMib;
  uint32_t slot = 999;            // the build's own network slot
  std::chrono::seconds boot_timeout{420};
  // The agent's first answer, within the boot timeout: the agent answers ~10 s after QEMU
  // starts under emulation, and a boot that hangs early (seen on an idle host too) never gets
  // there, so it is retried after this rather than after the whole boot timeout.
  std::chrono::seconds agent_timeout{150};
  int attempts = 3;               // boot retries (a PIT-calibration hang happens when busy)
};

// The template directory name for these options and the image: "<name>@<key16>".
std::string TemplateDirName(const TemplateBuildOptions& o, const std::string& qemu_version);

// Returns the template directory name (under <cache>/templates), reusing a valid one.
boost::asio::awaitable<std::expected<std::string, std::string>> BuildTemplate(
    Jailer& jailer, TemplateBuildOptions options);

std::string QemuVersion(const std::string& binary = "qemu-system-x86_64");

}  // namespace deskbox::vmhost
