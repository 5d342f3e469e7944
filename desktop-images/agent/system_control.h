// Privileged operations on the guest kernel, behind an interface so tests never change the
// clock or the entropy pool of the machine that runs them.
#pragma once

#include <cstdint>
#include <expected>
#include <span>
#include <string>

#include "agent/error.h"

namespace deskbox::agent {

class SystemControl {
 public:
  virtual ~SystemControl() = default;
  // clock_settime(CLOCK_REALTIME).
  virtual std::expected<void, AgentError> SetRealtime(int64_t unix_time_ns) = 0;
  // RNDADDENTROPY with full credit (8 bits per byte), then RNDRESEEDCRNG, on /dev/random.
  virtual std::expected<void, AgentError> AddEntropyAndReseed(std::span<const uint8_t> bytes) = 0;
  // uname(2) release, e.g. "6.1.0-18-amd64".
  virtual std::string KernelRelease() = 0;
  // The user's quota on the root filesystem: a hard block limit `bytes` above what the user's
  // files took up the first time a limit was set (kept in `base_file`, so a restarted agent
  // keeps the same base). UNSUPPORTED when the filesystem keeps no user quota.
  virtual std::expected<void, AgentError> LimitDiskGrowth(uint32_t uid, uint64_t bytes,
                                                          const std::string& base_file) = 0;
};

class LinuxSystemControl final : public SystemControl {
 public:
  std::expected<void, AgentError> SetRealtime(int64_t unix_time_ns) override;
  std::expected<void, AgentError> AddEntropyAndReseed(std::span<const uint8_t> bytes) override;
  std::string KernelRelease() override;
  std::expected<void, AgentError> LimitDiskGrowth(uint32_t uid, uint64_t bytes,
                                                  const std::string& base_file) override;
};

}  // namespace deskbox::agent
