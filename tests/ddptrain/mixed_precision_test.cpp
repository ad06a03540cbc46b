// Mixed precision: the autocast scope (bf16 on the CPU; fp16 needs CUDA, see
// tests/gpu) and the dynamic loss scaler's rules, on CPU tensors.
#include "mixed_precision.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

namespace ddp::train {
namespace {

torch::Tensor param_with_grad(std::vector<float> grad) {
  torch::Tensor p = torch::zeros({static_cast<int64_t>(grad.size())}, torch::requires_grad());
  p.mutable_grad() = torch::tensor(grad);
  return p;
}

TEST(AutocastScope, Bf16OnTheCpuWhileAliveOnly) {
  const torch::Tensor a = torch::randn({4, 8});
  const torch::Tensor w = torch::randn({8, 3});
  {
    AutocastScope outer(at::kCPU, at::kBFloat16);
    EXPECT_EQ(torch::mm(a, w).scalar_type(), at::kBFloat16);
    {
      AutocastScope nested(at::kCPU, at::kBFloat16);
      EXPECT_EQ(torch::mm(a, w).scalar_type(), at::kBFloat16);
    }
    EXPECT_EQ(torch::mm(a, w).scalar_type(), at::kBFloat16) << "leaving a nested scope keeps the outer one";
  }
  EXPECT_EQ(torch::mm(a, w).scalar_type(), at::kFloat);
}

TEST(AutocastScope, Fp32IsNoAutocast) {
  AutocastScope none(at::kCPU, at::kFloat);
  EXPECT_EQ(torch::mm(torch::randn({2, 2}), torch::randn({2, 2})).scalar_type(), at::kFloat);
}

TEST(DynamicLossScaler, UnscalesFiniteGradientsAndKeepsTheStep) {
  DynamicLossScaler scaler(4.0, 1000);
  torch::Tensor p = param_with_grad({8.0f, -2.0f});
  torch::Tensor no_grad = torch::zeros({2}, torch::requires_grad());  // skipped, as an optimizer does
  EXPECT_TRUE(scaler.unscale_and_update({p, no_grad}));
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({2.0f, -0.5f})));
  EXPECT_EQ(scaler.scale(), 4.0);
  EXPECT_EQ(scaler.good_steps(), 1);
}

TEST(DynamicLossScaler, AnInfOrNanSkipsTheStepAndHalvesTheScale) {
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    DynamicLossScaler scaler(1024.0, 1000);
    torch::Tensor ok = param_with_grad({1.0f});
    EXPECT_TRUE(scaler.unscale_and_update({ok}));
    torch::Tensor p = param_with_grad({1.0f, bad});
    EXPECT_FALSE(scaler.unscale_and_update({ok, p}));
    EXPECT_EQ(scaler.scale(), 512.0);
    EXPECT_EQ(scaler.good_steps(), 0) << "a skipped step restarts the run of good steps";
  }
}

TEST(DynamicLossScaler, DoublesAfterGrowthIntervalGoodStepsAndNeverFallsBelowOne) {
  DynamicLossScaler scaler(2.0, 3);
  for (int i = 0; i < 3; ++i) {
    torch::Tensor p = param_with_grad({1.0f});
    EXPECT_TRUE(scaler.unscale_and_update({p}));
  }
  EXPECT_EQ(scaler.scale(), 4.0);
  EXPECT_EQ(scaler.good_steps(), 0);
  for (int i = 0; i < 5; ++i) {
    torch::Tensor p = param_with_grad({std::numeric_limits<float>::infinity()});
    EXPECT_FALSE(scaler.unscale_and_update({p}));
  }
  EXPECT_EQ(scaler.scale(), 1.0);
}

TEST(DynamicLossScaler, RestoreResumesScaleAndGoodSteps) {
  DynamicLossScaler scaler;
  scaler.restore(256.0, 1999);
  torch::Tensor p = param_with_grad({512.0f});
  EXPECT_TRUE(scaler.unscale_and_update({p}));
  EXPECT_TRUE(torch::equal(p.grad(), torch::tensor({2.0f})));
  EXPECT_EQ(scaler.scale(), 512.0) << "the 2000th good step doubles it";
}

}  // namespace
}  // namespace ddp::train
