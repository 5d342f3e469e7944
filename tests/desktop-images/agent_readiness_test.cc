#include "agent/readiness.h"

#include <gtest/gtest.h>

#include "agent_fakes.h"

namespace deskbox::agent {
namespace {

using namespace std::chrono_literals;

TEST(AgentReadiness, ParsesProcStat) {
  const std::string stat =
      "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0\n"
      "cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n"
      "intr 1462898 0 0\n";
  auto times = ParseProcStat(stat);
  ASSERT_TRUE(times);
  EXPECT_EQ(times->idle, 46828483u + 16683u);
  EXPECT_EQ(times->total, 10132153u + 290696u + 3084719u + 46828483u + 16683u + 0u + 25195u + 0u);
}

TEST(AgentReadiness, ProcStatOldKernelsAndGarbage) {
  auto four = ParseProcStat("cpu  1 2 3 4\n");
  ASSERT_TRUE(four);
  EXPECT_EQ(four->idle, 4u);
  EXPECT_EQ(four->total, 10u);
  EXPECT_FALSE(ParseProcStat(""));
  EXPECT_FALSE(ParseProcStat("cpu0 1 2 3 4\n"));
  EXPECT_FALSE(ParseProcStat("cpu  1 2 x 4\n"));
  EXPECT_FALSE(ParseProcStat("cpu  1 2 3\n"));
  EXPECT_FALSE(ParseProcStat("cpu  18446744073709551615 18446744073709551615 0 1\n"));
  EXPECT_FALSE(ParseProcStat("cpu  -1 2 3 4\n"));
}

TEST(AgentReadiness, IdleTrackerNeedsAFullWindow) {
  CpuIdleTracker tracker(2000ms);
  EXPECT_FALSE(tracker.Evaluate().window_complete);
  int64_t t = 0;
  uint64_t idle = 0, total = 0;
  auto step = [&](uint64_t idle_jiffies, uint64_t busy_jiffies) {
    t += 250'000'000;
    idle += idle_jiffies;
    total += idle_jiffies + busy_jiffies;
    tracker.Add({t, {idle, total}});
  };
  tracker.Add({t, {idle, total}});
  for (int i = 0; i < 7; ++i) step(45, 5);
  auto partial = tracker.Evaluate();  // 1.75 s
  EXPECT_FALSE(partial.window_complete);
  EXPECT_NEAR(partial.idle_fraction, 0.9, 1e-9);
  step(45, 5);  // 2.0 s
  auto full = tracker.Evaluate();
  EXPECT_TRUE(full.window_complete);
  EXPECT_NEAR(full.idle_fraction, 0.9, 1e-9);
  // A busy burst, then the window slides past it.
  step(0, 50);
  EXPECT_LT(tracker.Evaluate().idle_fraction, 0.85);
  for (int i = 0; i < 8; ++i) step(50, 0);
  EXPECT_NEAR(tracker.Evaluate().idle_fraction, 1.0, 1e-9);
  EXPECT_TRUE(tracker.Evaluate().window_complete);
  EXPECT_LE(tracker.size(), 10u);
}

TEST(AgentReadiness, IdleTrackerStaleAnchorAndCounterReset) {
  CpuIdleTracker tracker(2000ms);
  tracker.Add({0, {100, 200}});
  tracker.Add({60'000'000'000, {5000, 6000}});  // a minute later: not "the last 2 s"
  EXPECT_FALSE(tracker.Evaluate().window_complete);
  tracker.Add({61'000'000'000, {10, 20}});  // counters went backwards (restore): start over
  EXPECT_EQ(tracker.size(), 1u);
  EXPECT_FALSE(tracker.Evaluate().window_complete);
}

TEST(AgentReadiness, ParsesXwininfo) {
  const std::string root =
      "\nxwininfo: Window id: 0x1e3 (the root window) (has no name)\n\n"
      "  Absolute upper-left X:  0\n  Absolute upper-left Y:  0\n"
      "  Width: 1920\n  Height: 1080\n  Depth: 24\n";
  auto size = ParseRootGeometry(root);
  ASSERT_TRUE(size);
  EXPECT_EQ(size->width, 1920u);
  EXPECT_EQ(size->height, 1080u);
  EXPECT_FALSE(ParseRootGeometry("  Width: 1920\n"));
  EXPECT_FALSE(ParseRootGeometry("  Width: abc\n  Height: 2\n"));

  const std::string tree =
      "  Root window id: 0x1e3 (the root window) (has no name)\n"
      "     3 children:\n"
      "     0x200001 \"xterm\": (\"xterm\" \"XTerm\")  10x10+0+0  +0+0\n"
      "     0x400001 \"chromium\": (\"chromium\" \"Chromium\")  10x10+-100+-100  +-100+-100\n"
      "        1 child:\n"
      "        0x600003 \"Example - Chromium\": (\"chromium\" \"Chromium\")  800x600+0+0  +0+0\n"
      "     0xZZ \"Chromium fake\"\n";
  EXPECT_EQ(ChromiumWindowIds(tree, 8), (std::vector<std::string>{"0x400001", "0x600003"}));
  EXPECT_EQ(ChromiumWindowIds(tree, 1).size(), 1u);
  EXPECT_TRUE(IsViewable("  Map State: IsViewable\n"));
  EXPECT_FALSE(IsViewable("  Map State: IsUnMapped\n"));
  EXPECT_FALSE(IsViewable(""));
}

TEST(AgentReadiness, ParsesDevToolsJson) {
  EXPECT_EQ(ParseBrowserVersion(R"({"Browser": "Chrome/120.0.1", "V8-Version": "1"})"),
            "Chrome/120.0.1");
  EXPECT_FALSE(ParseBrowserVersion(R"({"Browser": 5})"));
  EXPECT_FALSE(ParseBrowserVersion("[]"));
  EXPECT_FALSE(ParseBrowserVersion("{not json"));
  EXPECT_TRUE(HasPageTarget(R"([{"type": "service_worker"}, {"type": "page"}])"));
  EXPECT_FALSE(HasPageTarget(R"([{"type": "service_worker"}])"));
  EXPECT_FALSE(HasPageTarget(R"([{"title": "\"type\": \"page\""}])"));
  EXPECT_FALSE(HasPageTarget(R"({"type": "page"})"));
  EXPECT_FALSE(HasPageTarget("[{"));
}

struct ReadinessFixture : ::testing::Test {
  testing::FakeClock clock;
  testing::FakeDesktopProbe probe;
  testing::FakeSystemControl system;
};

TEST_F(ReadinessFixture, NothingUp) {
  ReadinessChecker checker(clock, probe, system);
  auto report = checker.Wait(0, false);
  EXPECT_FALSE(report.ready());
  EXPECT_FALSE(report.x_ready());
  EXPECT_FALSE(report.cdp_ready());
  EXPECT_FALSE(report.first_paint());
  EXPECT_EQ(report.kernel_release(), "6.1.0-test-amd64");
  EXPECT_EQ(report.screen_width(), 0u);
}

TEST_F(ReadinessFixture, AllUpWithoutSettling) {
  probe.SetAllUp();
  ReadinessChecker checker(clock, probe, system);
  const int64_t start = clock.MonotonicNs();
  auto report = checker.Wait(10'000, false);
  EXPECT_TRUE(report.ready());
  EXPECT_TRUE(report.first_paint());
  EXPECT_EQ(report.chromium_version(), "Chrome/120.0.6099.71");
  EXPECT_EQ(report.screen_width(), 1280u);
  EXPECT_EQ(report.screen_height(), 800u);
  EXPECT_EQ(clock.MonotonicNs(), start) << "ready at once: no waiting";
}

TEST_F(ReadinessFixture, PageTargetWithoutMappedWindowIsNoFirstPaint) {
  probe.SetAllUp();
  probe.xwininfo["-id 0x600003"] = "  Map State: IsUnMapped\n";
  ReadinessChecker checker(clock, probe, system);
  auto report = checker.Wait(1000, false);
  EXPECT_TRUE(report.cdp_ready());
  EXPECT_FALSE(report.first_paint());
  EXPECT_FALSE(report.ready());
  // It polled every 250 ms for the whole timeout.
  EXPECT_GE(probe.proc_stat_reads, 4);
}

TEST_F(ReadinessFixture, RequireSettledWaitsForTheWindow) {
  probe.SetAllUp();
  probe.idle_per_read = 95;
  probe.busy_per_read = 5;
  ReadinessChecker checker(clock, probe, system);
  const int64_t start = clock.MonotonicNs();
  auto report = checker.Wait(10'000, true);
  EXPECT_TRUE(report.ready());
  EXPECT_TRUE(report.settled());
  EXPECT_NEAR(report.idle_fraction(), 0.95, 1e-9);
  const int64_t waited = clock.MonotonicNs() - start;
  EXPECT_GE(waited, 2'000'000'000);
  EXPECT_LT(waited, 3'000'000'000);
  // The window was looked up once (tree + 2 candidates) plus the final screen size, not on
  // each of the ~9 polls: spawning xwininfo would itself keep the guest busy.
  EXPECT_EQ(probe.xwininfo_calls, 4);
}

TEST_F(ReadinessFixture, BusyGuestTimesOutUnsettled) {
  probe.SetAllUp();
  probe.idle_per_read = 50;
  probe.busy_per_read = 50;
  ReadinessChecker checker(clock, probe, system);
  auto report = checker.Wait(5'000, true);
  EXPECT_FALSE(report.ready());
  EXPECT_FALSE(report.settled());
  EXPECT_NEAR(report.idle_fraction(), 0.5, 1e-9);
  // Without require_settled the same guest is ready.
  EXPECT_TRUE(checker.Wait(0, false).ready());
}

TEST_F(ReadinessFixture, BecomesReadyMidWait) {
  probe.up_after_reads = 5;  // the desktop comes up during the fifth poll
  ReadinessChecker checker(clock, probe, system);
  const int64_t start = clock.MonotonicNs();
  auto report = checker.Wait(60'000, false);
  EXPECT_TRUE(report.ready());
  // Polls 1-5 saw nothing (the probe comes up at the end of poll 5), poll 6 sees it all.
  EXPECT_EQ(clock.MonotonicNs() - start, 5 * 250'000'000);
}

}  // namespace
}  // namespace deskbox::agent
