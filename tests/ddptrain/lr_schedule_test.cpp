// Learning-rate schedule: constant, linear warm-up, cosine decay to 0 at
// `steps`, and the edge cases (no warm-up, warm-up as long as the run or
// longer, steps past the end). Expected values come from the formula in
// lr_schedule.h, written out here, not from the code under test.
#include "lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace ddp::train {
namespace {

LrSchedule schedule(double base, const char* kind, int64_t warmup, int64_t steps) {
  LrSchedule s;
  s.base = base;
  s.kind = kind;
  s.warmup = warmup;
  s.steps = steps;
  return s;
}

TEST(LrSchedule, ConstantWithoutWarmUpIsTheBaseRateAtEveryStep) {
  const LrSchedule s = schedule(0.25, "constant", 0, 10);
  for (int64_t step : {0, 1, 5, 9, 10, 1000}) EXPECT_EQ(s.at(step), 0.25) << step;
}

TEST(LrSchedule, DefaultIsConstant) {
  LrSchedule s;
  s.base = 0.5;
  EXPECT_EQ(s.at(0), 0.5);
  EXPECT_EQ(s.at(7), 0.5);
}

TEST(LrSchedule, WarmUpRisesLinearlyFromBaseOverWarmupToBase) {
  // base 0.5, warm-up 4: step s < 4 gives 0.5 * (s + 1) / 4, all exact in binary.
  for (const char* kind : {"constant", "cosine"}) {
    SCOPED_TRACE(kind);
    const LrSchedule s = schedule(0.5, kind, 4, 100);
    EXPECT_EQ(s.at(0), 0.125);  // base / warmup
    EXPECT_EQ(s.at(1), 0.25);   // midway
    EXPECT_EQ(s.at(2), 0.375);
    EXPECT_EQ(s.at(3), 0.5);  // the last warm-up step reaches base
  }
}

TEST(LrSchedule, ConstantAfterWarmUpStaysAtBase) {
  const LrSchedule s = schedule(0.5, "constant", 4, 100);
  for (int64_t step : {4, 5, 50, 99, 100, 500}) EXPECT_EQ(s.at(step), 0.5) << step;
}

TEST(LrSchedule, CosineStartsAtBaseHalvesAtItsMidpointAndEndsAtZero) {
  // warm-up 10, steps 110: the cosine spans steps 10..110 (100 steps).
  const double base = 0.8;
  const LrSchedule s = schedule(base, "cosine", 10, 110);
  EXPECT_EQ(s.at(10), base);                // progress 0
  EXPECT_DOUBLE_EQ(s.at(60), base / 2);     // progress 1/2: cos(pi/2) = 0
  EXPECT_DOUBLE_EQ(s.at(35), base * 0.5 * (1.0 + std::sqrt(0.5)));  // progress 1/4
  EXPECT_DOUBLE_EQ(s.at(85), base * 0.5 * (1.0 - std::sqrt(0.5)));  // progress 3/4
  // The last step the run executes (0-based) is steps - 1: progress 99/100.
  const double last = base * 0.5 * (1.0 + std::cos(M_PI * 0.99));
  EXPECT_DOUBLE_EQ(s.at(109), last);
  EXPECT_GT(s.at(109), 0.0);
  EXPECT_LT(s.at(109), 1e-3 * base);
  EXPECT_EQ(s.at(110), 0.0);  // decays to 0 at `steps`
}

TEST(LrSchedule, CosineNeverRisesAfterWarmUpAndStaysAtZeroPastTheEnd) {
  const LrSchedule s = schedule(1.0, "cosine", 5, 50);
  double previous = s.at(4);
  EXPECT_EQ(previous, 1.0);
  for (int64_t step = 5; step < 50; ++step) {
    const double lr = s.at(step);
    EXPECT_LE(lr, previous) << step;
    if (step > 5) {
      EXPECT_LT(lr, previous) << step;  // strictly falling once the cosine has started
    }
    EXPECT_GT(lr, 0.0) << step;
    previous = lr;
  }
  for (int64_t step : {50, 51, 100, 10'000}) EXPECT_EQ(s.at(step), 0.0) << step;
}

TEST(LrSchedule, CosineWithoutWarmUpStartsAtBase) {
  // steps 4, no warm-up: progress step / 4 -> base * {1, (1+sqrt(1/2))/2, 1/2, (1-sqrt(1/2))/2, 0}.
  const LrSchedule s = schedule(2.0, "cosine", 0, 4);
  EXPECT_EQ(s.at(0), 2.0);
  EXPECT_DOUBLE_EQ(s.at(1), 1.0 + std::sqrt(0.5));
  EXPECT_DOUBLE_EQ(s.at(2), 1.0);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0 - std::sqrt(0.5));
  EXPECT_EQ(s.at(4), 0.0);
}

TEST(LrSchedule, CosineOverASingleStepRunIsTheBaseRate) {
  const LrSchedule s = schedule(0.3, "cosine", 0, 1);
  EXPECT_EQ(s.at(0), 0.3);
  EXPECT_EQ(s.at(1), 0.0);
}

TEST(LrSchedule, WarmUpAsLongAsTheRunCoversEveryStep) {
  // warm-up == steps: every step of the run is warm-up; the last one reaches base.
  const LrSchedule s = schedule(1.0, "cosine", 8, 8);
  for (int64_t step = 0; step < 8; ++step) EXPECT_EQ(s.at(step), static_cast<double>(step + 1) / 8.0) << step;
}

TEST(LrSchedule, WarmUpLongerThanTheRunNeverReachesBase) {
  // warm-up 10 > steps 4: the run sees only the first 4 warm-up rates.
  for (const char* kind : {"constant", "cosine"}) {
    SCOPED_TRACE(kind);
    const LrSchedule s = schedule(1.0, kind, 10, 4);
    EXPECT_EQ(s.at(0), 0.1);
    EXPECT_EQ(s.at(3), 0.4);
    for (int64_t step = 0; step < 4; ++step) EXPECT_LT(s.at(step), 1.0) << step;
  }
}

TEST(LrSchedule, IsAPureFunctionOfTheStep) {
  // A resumed run asks for later steps first; the answers must not depend on order.
  const LrSchedule s = schedule(0.7, "cosine", 3, 30);
  const double late = s.at(20);
  const double early = s.at(1);
  EXPECT_EQ(s.at(20), late);
  EXPECT_EQ(s.at(1), early);
  const LrSchedule copy = s;
  EXPECT_EQ(copy.at(20), late);
}

}  // namespace
}  // namespace ddp::train
