#include <gtest/gtest.h>

#include "vmhost/sandbox.h"

namespace deskbox::vmhost {
namespace {
using S = SandboxState;

TEST(SandboxState, AllowedTransitions) {
  EXPECT_TRUE(CanTransition(S::kCreating, S::kRunning));
  EXPECT_TRUE(CanTransition(S::kCreating, S::kFailed));
  EXPECT_TRUE(CanTransition(S::kRunning, S::kPaused));
  EXPECT_TRUE(CanTransition(S::kPaused, S::kRunning));
  EXPECT_TRUE(CanTransition(S::kRunning, S::kFailed));
  EXPECT_TRUE(CanTransition(S::kPaused, S::kFailed));
  for (S s : {S::kCreating, S::kRunning, S::kPaused, S::kFailed})
    EXPECT_TRUE(CanTransition(s, S::kStopped)) << ToString(s);
}

TEST(SandboxState, ForbiddenTransitions) {
  EXPECT_FALSE(CanTransition(S::kCreating, S::kPaused));
  EXPECT_FALSE(CanTransition(S::kRunning, S::kCreating));
  EXPECT_FALSE(CanTransition(S::kFailed, S::kRunning));
  EXPECT_FALSE(CanTransition(S::kPaused, S::kPaused));
  EXPECT_FALSE(CanTransition(S::kRunning, S::kRunning));
  for (S s : {S::kCreating, S::kRunning, S::kPaused, S::kFailed, S::kStopped})
    EXPECT_FALSE(CanTransition(S::kStopped, s)) << "stopped is terminal";
}

}  // namespace
}  // namespace deskbox::vmhost
