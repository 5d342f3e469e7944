// SandboxManager's trimming of idle sandboxes' translation caches (IdleTrim decides when).
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#include "async_sleep.h"
#include "common/files.h"
#include "common/log.h"
#include "common/slot_network.h"
#include "vmhost/devtools_http.h"
#include "manager_names.h"
#include "vmhost/sandbox_manager.h"

namespace deskbox::vmhost {

using manager::kLog;

asio::awaitable<std::expected<TrimStats, VmError>> SandboxManager::Trim(Sandbox& sb, uint64_t above_kib) {
  jailer::v1::Request req;
  req.mutable_trim_translation_cache()->set_slot(sb.slot_);
  req.mutable_trim_translation_cache()->set_above_kib(above_kib);
  sb.idle_trim_.Asked(std::chrono::steady_clock::now());
  auto r = co_await CallJailer(jailer_, std::move(req));
  if (!r) co_return std::unexpected(r.error());
  const auto& t = r->response.trim();
  sb.idle_trim_.Answered(std::chrono::steady_clock::now(), t.trimmable());
  if (t.trimmable()) ++trims_total_;
  co_return TrimStats{t.trimmable(), t.resident_before_kib()};
}

asio::awaitable<std::expected<TrimStats, VmError>> SandboxManager::TrimTranslationCache(const std::string& id,
                                                                                       uint64_t above_kib) {
  auto sb = Find(id);
  if (!sb) co_return std::unexpected(VmError{VmError::Code::kNotFound, "no sandbox " + id});
  // Not a paused one: its vCPUs idle only once it is resumed, and it would be trimmed just as
  // it is used again.
  if (sb->state_ != SandboxState::kRunning)
    co_return std::unexpected(VmError{VmError::Code::kInvalidState, fmt::format("sandbox {} is {}", id, ToString(sb->state_))});
  co_return co_await Trim(*sb, above_kib);
}

namespace {
// utime + stime of a process, in seconds; negative if it cannot be read.
double ProcessCpuSeconds(int pid) {
  auto s = ReadFile(fmt::format("/proc/{}/stat", pid), 4096);
  if (!s) return -1;
  size_t close = s->rfind(')');
  if (close == std::string::npos) return -1;
  // Fields after the command: state is the 1st, utime the 12th, stime the 13th.
  std::istringstream in(s->substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 1; i <= 13 && in >> field; ++i)
    if (i >= 12) ticks += std::strtod(field.c_str(), nullptr);
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}
}  // namespace

void SandboxManager::StartTrimLoop() {
  if (trim_loop_running_ || accelerator_ != "tcg" || config_.trim_idle_after.count() == 0) return;
  trim_loop_running_ = true;
  asio::co_spawn(executor_, TrimLoop(alive_), asio::detached);
}

void SandboxManager::SetIdleTrim(std::chrono::seconds after, uint32_t regrown_mib) {
  config_.trim_idle_after = after;
  config_.trim_regrown_mib = regrown_mib;
  if (refill_started_) StartTrimLoop();
}

asio::awaitable<void> SandboxManager::TrimLoop(std::shared_ptr<bool> alive) {
  while (true) {
    if (config_.trim_idle_after.count() == 0) {  // turned off (SetIdleTrim)
      trim_loop_running_ = false;
      co_return;
    }
    co_await Sleep(std::min<std::chrono::milliseconds>(std::chrono::seconds(5), config_.trim_idle_after));
    if (!*alive || shutting_down_) co_return;
    // Not the warm pool's: a trimmed spare would be handed out with its code still to translate,
    // which is what the warm pool is there to have done already.
    std::vector<std::shared_ptr<Sandbox>> candidates;
    for (auto& [id, sb] : sandboxes_) candidates.push_back(sb);
    auto now = std::chrono::steady_clock::now();
    const IdleTrimRules rules{config_.trim_idle_after, config_.trim_idle_cpu,
                              config_.trim_regrown_mib};
    for (auto& sb : candidates) {
      if (sb->state_ != SandboxState::kRunning || sb->qemu_pid_ <= 0) continue;
      double cpu = ProcessCpuSeconds(sb->qemu_pid_);
      if (cpu < 0) continue;
      // A browser reloading its pages is busy whatever the CPU says: it is about to run code. So
      // is one a client is connected to, as far as trimming goes: its next input may come any
      // moment, and the delay starts again when the client leaves.
      bool busy = sb->browser_refreshing_ || (in_use_ && in_use_(sb->id_));
      auto trim = sb->idle_trim_.Look(now, cpu, busy, rules);
      if (!trim) continue;
      uint64_t above_kib = *trim;
      auto r = co_await Trim(*sb, above_kib);
      if (!*alive) co_return;
      if (!r) {
        log::Warn(kLog, "slot {}: trimming its translation cache: {}", sb->slot_, r.error().message);
        sb->idle_trim_.Answered(std::chrono::steady_clock::now(), false);
      } else if (r->trimmable) {
        log::Debug(kLog, "slot {}: idle, trimming its translation cache ({} MiB in memory)",
                   sb->slot_, r->resident_before_kib >> 10);
      } else if (above_kib > 0) {
        log::Debug(kLog, "slot {}: idle, translation cache {} MiB, under the {} MiB mark", sb->slot_,
                   r->resident_before_kib >> 10, above_kib >> 10);
      }
    }
  }
}

}  // namespace deskbox::vmhost
