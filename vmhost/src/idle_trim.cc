#include "vmhost/idle_trim.h"

namespace deskbox::vmhost {

std::optional<uint64_t> IdleTrim::Look(Clock::time_point now, double cpu_seconds, bool busy,
                                       const IdleTrimRules& rules) {
  double last = cpu_seconds_;
  double secs = std::chrono::duration<double>(now - cpu_at_).count();
  cpu_seconds_ = cpu_seconds;
  cpu_at_ = now;
  // The first look, or one during a trim's own burst: nothing to compare; idle from here.
  if (last < 0 || secs <= 0 || now < settles_at_) {
    if (!trimmed_) idle_since_ = now;
    return std::nullopt;
  }
  if (busy || (cpu_seconds - last) / secs >= rules.idle_cpu) {
    idle_since_ = now;
    trimmed_ = false;
    return std::nullopt;
  }
  if (now - idle_since_ < rules.idle_after) return std::nullopt;
  if (!trimmed_) return 0;
  // Trimmed and idle since: again only once its cache has grown back past the mark.
  if (rules.regrown_mib == 0 || now - asked_at_ < rules.idle_after) return std::nullopt;
  return uint64_t{rules.regrown_mib} << 10;
}

void IdleTrim::Answered(Clock::time_point now, bool took) {
  trimmed_ = true;
  if (!took) return;
  ++trims_;
  settles_at_ = now + kSettle;
}

}  // namespace deskbox::vmhost
