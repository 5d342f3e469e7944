#pragma once
// IdleTrim: when an idle sandbox's TCG translation cache is given back to the host
// (VmHostConfig::trim_idle_after; jailer.proto TrimTranslationCache). The decision alone, from
// samples of its QEMU's CPU time: the sandbox manager samples every few seconds, asks the jailer
// for the trim this returns, and reports how it went. Pure: no clock of its own, no I/O.
#include <chrono>
#include <cstdint>
#include <optional>

namespace deskbox::vmhost {

struct IdleTrimRules {
  std::chrono::seconds idle_after{60};  // idle this long before a trim
  double idle_cpu = 0.15;               // below this share of a core, QEMU counts as idle
  uint32_t regrown_mib = 48;            // trimmed and still idle: again above this (0: never)
};

class IdleTrim {
 public:
  using Clock = std::chrono::steady_clock;
  // After a trim the guest translates again the code it runs (measured: under a second of CPU
  // for an idle desktop): that burst is the trim's, not the user's, for this long.
  static constexpr std::chrono::seconds kSettle{10};

  // One look at `now`: QEMU's CPU seconds so far, and whether the sandbox is busy whatever its
  // CPU says (its browser reloading its pages, a client connected). The trim to ask for, as the
  // size in KiB the cache must exceed (0: whatever it holds); nullopt: none.
  std::optional<uint64_t> Look(Clock::time_point now, double cpu_seconds, bool busy,
                               const IdleTrimRules& rules);
  // A trim was asked for at `now` (by Look's answer or by a caller)...
  void Asked(Clock::time_point now) { asked_at_ = now; }
  // ...and answered: `took` if the cache was trimmed (not only looked at). A failed trim counts
  // as a trim that did not take: the sandbox is looked at again after idle_after.
  void Answered(Clock::time_point now, bool took);

  // Trimmed since it last was busy.
  bool trimmed() const { return trimmed_; }
  // Trims that took, over the sandbox's life.
  unsigned trims() const { return trims_; }

 private:
  bool trimmed_ = false;
  unsigned trims_ = 0;
  double cpu_seconds_ = -1;  // at the last look
  Clock::time_point cpu_at_, idle_since_;
  Clock::time_point settles_at_;  // CPU before this does not count as busy
  Clock::time_point asked_at_;    // last trim asked for, taken or not
};

}  // namespace deskbox::vmhost
