// IdleTrim: which looks at a sandbox's CPU time lead to a trim, and of what.
#include "vmhost/idle_trim.h"

#include <gtest/gtest.h>

namespace deskbox::vmhost {
namespace {

using namespace std::chrono_literals;
using Clock = IdleTrim::Clock;

class IdleTrimTest : public ::testing::Test {
 protected:
  // A look `dt` after the previous one, QEMU having used `cpu_share` of a core meanwhile.
  std::optional<uint64_t> Look(std::chrono::seconds dt, double cpu_share, bool busy = false) {
    now_ += dt;
    cpu_ += cpu_share * static_cast<double>(dt.count());
    return trim_.Look(now_, cpu_, busy, rules_);
  }
  // Asks for the trim Look returned and answers it.
  void Trim(bool took) {
    trim_.Asked(now_);
    trim_.Answered(now_, took);
  }

  IdleTrimRules rules_{.idle_after = 60s, .idle_cpu = 0.15, .regrown_mib = 48};
  IdleTrim trim_;
  Clock::time_point now_ = Clock::time_point() + 1000s;
  double cpu_ = 5;
};

TEST_F(IdleTrimTest, AnIdleSandboxIsTrimmedOnceIdleForTheWholeDelay) {
  EXPECT_FALSE(Look(0s, 0));  // the first look only takes a sample
  for (int i = 0; i < 11; ++i) EXPECT_FALSE(Look(5s, 0.02)) << i;  // 55 s idle
  EXPECT_EQ(Look(5s, 0.02), 0u);  // 60 s: trim, whatever the cache holds
  Trim(true);
  EXPECT_TRUE(trim_.trimmed());
  EXPECT_EQ(trim_.trims(), 1u);
}

TEST_F(IdleTrimTest, BusySpellsStartTheDelayAgain) {
  Look(0s, 0);
  for (int i = 0; i < 10; ++i) Look(5s, 0.02);
  EXPECT_FALSE(Look(5s, 0.5));  // busy CPU
  for (int i = 0; i < 11; ++i) EXPECT_FALSE(Look(5s, 0.02)) << i;
  EXPECT_FALSE(Look(5s, 0.0, /*busy=*/true));  // a client connected, however idle its CPU
  for (int i = 0; i < 11; ++i) EXPECT_FALSE(Look(5s, 0.0)) << i;
  EXPECT_EQ(Look(5s, 0.0), 0u);
}

TEST_F(IdleTrimTest, TheTrimsOwnBurstIsNotTheUsers) {
  Look(0s, 0);
  for (int i = 0; i < 12; ++i) Look(5s, 0.02);
  Trim(true);
  // Translating again right after the trim: within the settle time, not busy.
  EXPECT_FALSE(Look(5s, 0.9));
  EXPECT_TRUE(trim_.trimmed());
  // The same burst after the settle time counts.
  now_ += IdleTrim::kSettle;
  EXPECT_FALSE(Look(5s, 0.9));
  EXPECT_FALSE(trim_.trimmed());
}

TEST_F(IdleTrimTest, ATrimmedIdleSandboxIsTrimmedAgainAboveTheRegrownMark) {
  Look(0s, 0);
  for (int i = 0; i < 12; ++i) Look(5s, 0.02);
  Trim(true);
  for (int i = 0; i < 11; ++i) EXPECT_FALSE(Look(5s, 0.02)) << i;  // 55 s since the trim
  EXPECT_EQ(Look(5s, 0.02), 48u << 10);  // then only if the cache holds more than 48 MiB
  Trim(false);                           // it held less: nothing trimmed, looked at again later
  EXPECT_EQ(trim_.trims(), 1u);
  EXPECT_FALSE(Look(5s, 0.02));
  for (int i = 0; i < 11; ++i) Look(5s, 0.02);
  EXPECT_EQ(Look(5s, 0.02), 48u << 10);
}

TEST_F(IdleTrimTest, NoRegrownMarkMeansOneTrimPerIdleSpell) {
  rules_.regrown_mib = 0;
  Look(0s, 0);
  for (int i = 0; i < 12; ++i) Look(5s, 0.02);
  Trim(true);
  for (int i = 0; i < 40; ++i) EXPECT_FALSE(Look(5s, 0.02)) << i;
  // Busy, then idle again for the delay: a new spell, a new trim.
  Look(5s, 0.5);
  for (int i = 0; i < 11; ++i) Look(5s, 0.02);
  EXPECT_EQ(Look(5s, 0.02), 0u);
}

TEST_F(IdleTrimTest, AFailedTrimWaitsTheDelayLikeATrimmedOne) {
  Look(0s, 0);
  for (int i = 0; i < 12; ++i) Look(5s, 0.02);
  trim_.Asked(now_);
  trim_.Answered(now_, false);  // the jailer failed
  EXPECT_EQ(trim_.trims(), 0u);
  for (int i = 0; i < 11; ++i) EXPECT_FALSE(Look(5s, 0.02)) << i;
  EXPECT_EQ(Look(5s, 0.02), 48u << 10);
}

}  // namespace
}  // namespace deskbox::vmhost
