// TrainingProgress (health.h): what the heartbeat thread reads of the
// training loop. Each set_phase() counts, so a loop that goes through its
// phases with no step and no collective (an evaluation pass) is seen working.
#include <gtest/gtest.h>

#include "ddp/runtime/health.h"

namespace {

TEST(TrainingProgress, EveryPhaseSetCountsAsActivityWithoutMovingTheStep) {
  ddp::TrainingProgress progress;
  EXPECT_EQ(progress.activity(), 0u);
  progress.begin_step(7);
  for (int batch = 0; batch < 3; ++batch) {
    progress.set_phase(ddp::Phase::kData);
    progress.set_phase(ddp::Phase::kForward);
  }
  EXPECT_EQ(progress.activity(), 6u);
  EXPECT_EQ(progress.step(), 7);
  EXPECT_EQ(progress.phase(), ddp::Phase::kForward);
}

}  // namespace
