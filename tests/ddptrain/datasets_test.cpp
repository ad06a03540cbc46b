// Datasets (synthetic, Python file, text) and sharding.
#include "datasets.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <stdexcept>

#include "test_util.h"

namespace ddp::train {
namespace {

using testing::TempDir;

torch::Tensor bytes(const std::string& text) {
  std::vector<int64_t> values;
  for (unsigned char ch : text) values.push_back(ch);
  return torch::tensor(values, torch::kLong);
}

Batch all_of(const Dataset& d) { return d.gather(torch::arange(d.size(), torch::kLong)); }

TEST(SyntheticData, SameSeedSameDataOtherSeedOtherData) {
  auto a = all_of(*make_synthetic_classification(11, 300, {32}, 10));
  auto b = all_of(*make_synthetic_classification(11, 300, {32}, 10));
  auto c = all_of(*make_synthetic_classification(12, 300, {32}, 10));
  EXPECT_EQ(a.input.sizes().vec(), (std::vector<int64_t>{300, 32}));
  EXPECT_EQ(a.input.scalar_type(), torch::kFloat);
  EXPECT_EQ(a.target.sizes().vec(), std::vector<int64_t>{300});
  EXPECT_EQ(a.target.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(a.input, b.input));
  EXPECT_TRUE(torch::equal(a.target, b.target));
  EXPECT_FALSE(torch::equal(a.input, c.input));
  EXPECT_FALSE(torch::equal(a.target, c.target));
  // Roughly N(0, 1), labels in range and not all one class.
  EXPECT_NEAR(a.input.mean().item<double>(), 0.0, 0.05);
  EXPECT_NEAR(a.input.std().item<double>(), 1.0, 0.05);
  EXPECT_GE(a.target.min().item<int64_t>(), 0);
  EXPECT_LT(a.target.max().item<int64_t>(), 10);
  EXPECT_GE(std::get<0>(at::_unique(a.target)).numel(), 4);
}

TEST(SyntheticData, ImageShapeAndGather) {
  auto data = make_synthetic_classification(1, 50, {1, 8, 8}, 3);
  EXPECT_EQ(data->size(), 50);
  auto all = all_of(*data);
  EXPECT_EQ(all.input.sizes().vec(), (std::vector<int64_t>{50, 1, 8, 8}));
  auto some = data->gather(torch::tensor({7, 3, 7}, torch::kLong));
  EXPECT_TRUE(torch::equal(some.input[0], all.input[7]));
  EXPECT_TRUE(torch::equal(some.input[1], all.input[3]));
  EXPECT_TRUE(torch::equal(some.target, torch::stack({all.target[7], all.target[3], all.target[7]})));
}

TEST(SyntheticData, DoesNotTouchTheGlobalGenerator) {
  torch::manual_seed(5);
  auto expected = torch::rand({4});
  torch::manual_seed(5);
  make_synthetic_classification(3, 100, {16}, 4);
  EXPECT_TRUE(torch::equal(torch::rand({4}), expected));
}

TEST(SyntheticData, RejectsBadArguments) {
  EXPECT_THROW(make_synthetic_classification(1, 0, {4}, 3), std::invalid_argument);
  EXPECT_THROW(make_synthetic_classification(1, 10, {}, 3), std::invalid_argument);
  EXPECT_THROW(make_synthetic_classification(1, 10, {4}, 1), std::invalid_argument);
}

TEST(Sharding, UnionOverRanksIsTheGlobalBatch) {
  const int world = 4;
  const int64_t batch = 5, n = 1000;
  for (int64_t step : {0, 3, 7}) {
    std::vector<torch::Tensor> parts;
    for (int r = 0; r < world; ++r) {
      auto idx = shard_indices(step, r, world, batch, n, std::nullopt);
      EXPECT_EQ(idx.scalar_type(), torch::kLong);
      EXPECT_EQ(idx.numel(), batch);
      // rank r: the contiguous slice starting at s*G + r*B
      EXPECT_TRUE(torch::equal(idx, torch::arange(step * 20 + r * batch, step * 20 + r * batch + batch, torch::kLong)));
      parts.push_back(idx);
    }
    EXPECT_TRUE(torch::equal(torch::cat(parts), torch::arange(step * 20, step * 20 + 20, torch::kLong)));
  }
}

TEST(Sharding, WrapsAroundModuloN) {
  // N = 7, G = 6: step 2 covers positions 12..17 -> 5 6 0 | 1 2 3
  EXPECT_TRUE(torch::equal(shard_indices(2, 0, 2, 3, 7, std::nullopt), torch::tensor({5, 6, 0}, torch::kLong)));
  EXPECT_TRUE(torch::equal(shard_indices(2, 1, 2, 3, 7, std::nullopt), torch::tensor({1, 2, 3}, torch::kLong)));
  // Batch larger than the data set.
  EXPECT_TRUE(torch::equal(shard_indices(0, 0, 1, 5, 2, std::nullopt), torch::tensor({0, 1, 0, 1, 0}, torch::kLong)));
}

TEST(Sharding, ShuffleIsADeterministicPermutationPerEpoch) {
  const int world = 2;
  const int64_t batch = 4, n = 24;  // 3 steps per epoch
  auto epoch_indices = [&](int64_t epoch, uint64_t seed) {
    std::vector<torch::Tensor> parts;
    for (int64_t s = epoch * 3; s < epoch * 3 + 3; ++s) {
      for (int r = 0; r < world; ++r) parts.push_back(shard_indices(s, r, world, batch, n, seed));
    }
    return torch::cat(parts);
  };
  auto e0 = epoch_indices(0, 9), e1 = epoch_indices(1, 9);
  EXPECT_TRUE(torch::equal(std::get<0>(e0.sort()), torch::arange(n, torch::kLong)));
  EXPECT_TRUE(torch::equal(std::get<0>(e1.sort()), torch::arange(n, torch::kLong)));
  EXPECT_FALSE(torch::equal(e0, torch::arange(n, torch::kLong)));
  EXPECT_FALSE(torch::equal(e0, e1));
  EXPECT_TRUE(torch::equal(e0, epoch_indices(0, 9)));   // deterministic
  EXPECT_FALSE(torch::equal(e0, epoch_indices(0, 10)));  // seed matters
  EXPECT_TRUE(torch::equal(e0, shuffle_permutation(9, 0, n)));
  EXPECT_TRUE(torch::equal(e1, shuffle_permutation(9, 1, n)));
}

TEST(Sharding, ShuffleAcrossAnEpochBoundary) {
  // N = 5, G = 4: step 1 covers positions 4..7 = epoch 0 pos 4, epoch 1 pos 0..2.
  auto p0 = shuffle_permutation(3, 0, 5), p1 = shuffle_permutation(3, 1, 5);
  auto expected = torch::stack({p0[4], p1[0], p1[1], p1[2]});
  auto got = torch::cat({shard_indices(1, 0, 2, 2, 5, 3), shard_indices(1, 1, 2, 2, 5, 3)});
  EXPECT_TRUE(torch::equal(got, expected));
}

TEST(Sharding, ShufflePermutationIsFixedAcrossMachines) {
  // Pinned: the permutation is defined by this code (splitmix64 + Fisher-Yates),
  // not by LibTorch's generator, so every machine and version agrees.
  auto p = shuffle_permutation(1234, 0, 10);
  auto again = shuffle_permutation(1234, 0, 10);
  EXPECT_TRUE(torch::equal(p, again));
  std::set<int64_t> seen;
  for (int64_t i = 0; i < 10; ++i) seen.insert(p[i].item<int64_t>());
  EXPECT_EQ(seen.size(), 10u);
}

TEST(Sharding, RejectsBadArguments) {
  EXPECT_THROW(shard_indices(0, 2, 2, 4, 10, std::nullopt), std::invalid_argument);
  EXPECT_THROW(shard_indices(0, -1, 2, 4, 10, std::nullopt), std::invalid_argument);
  EXPECT_THROW(shard_indices(0, 0, 0, 4, 10, std::nullopt), std::invalid_argument);
  EXPECT_THROW(shard_indices(0, 0, 1, 0, 10, std::nullopt), std::invalid_argument);
  EXPECT_THROW(shard_indices(0, 0, 1, 4, 0, std::nullopt), std::invalid_argument);
  EXPECT_THROW(shard_indices(-1, 0, 1, 4, 10, std::nullopt), std::invalid_argument);
}

TEST(TextData, WindowsOfBytes) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string text = "hello, world\n\xff";
  {
    std::ofstream f(dir.file("t.txt"), std::ios::binary);
    f << text;
  }
  auto data = load_text_file(dir.file("t.txt"), 4);
  EXPECT_EQ(data->size(), static_cast<int64_t>(text.size()) - 4);
  auto b = data->gather(torch::tensor({0, 9}, torch::kLong));  // 9 = the last sample
  EXPECT_EQ(b.input.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(b.input, torch::stack({bytes("hell"), bytes("rld\n")})));
  EXPECT_TRUE(torch::equal(b.target, torch::stack({bytes("ello"), bytes("ld\n\xff")})));
  // Exactly context + 1 bytes: one sample.
  EXPECT_EQ(load_text_file(dir.file("t.txt"), static_cast<int64_t>(text.size()) - 1)->size(), 1);
}

TEST(TextData, Errors) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  {
    std::ofstream f(dir.file("short.txt"));
    f << "abcd";
  }
  try {
    load_text_file(dir.file("short.txt"), 4);
    ADD_FAILURE() << "short file accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("short.txt"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("shorter than context"), std::string::npos) << e.what();
  }
  try {
    load_text_file(dir.file("missing.txt"), 4);
    ADD_FAILURE() << "missing file accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("missing.txt"), std::string::npos) << e.what();
  }
}

TEST(TextData, SyntheticTextIsDeterministic) {
  auto a = make_synthetic_text(1, 1000), b = make_synthetic_text(1, 1000), c = make_synthetic_text(2, 1000);
  EXPECT_EQ(a.size(), 1000u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// Files written by Python's torch.save.
class ClassificationFile : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::python_has_torch()) GTEST_SKIP() << "/usr/bin/python3 cannot import torch";
    ASSERT_TRUE(dir_.ok());
    std::string log;
    const int rc = testing::run_python(dir_, R"PY(
import torch
x = torch.arange(30, dtype=torch.float32).view(10, 3) / 4
y = torch.arange(10) % 3
torch.save({"x": x, "y": y}, "good.pt")
torch.save({"x": x.double(), "y": y}, "good64.pt")
torch.save({"x": torch.zeros(10, 1, 2, 2), "y": y}, "image.pt")
torch.save(x, "tensor.pt")
torch.save({"x": x}, "no_y.pt")
torch.save({"y": y}, "no_x.pt")
torch.save({"x": x, "y": y.float()}, "y_float.pt")
torch.save({"x": x.long(), "y": y}, "x_int.pt")
torch.save({"x": x, "y": y[:9]}, "mismatch.pt")
open("garbage.pt", "wb").write(b"this is not a torch file")
)PY",
                                     &log);
    ASSERT_EQ(rc, 0) << log;
  }
  std::string error_of(const std::string& name) {
    try {
      load_classification_file(dir_.file(name));
    } catch (const std::runtime_error& e) {
      std::string what = e.what();
      EXPECT_NE(what.find(name), std::string::npos) << what;  // names the file
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;   // one line
      return what;
    }
    ADD_FAILURE() << name << " accepted";
    return {};
  }
  TempDir dir_;
};

TEST_F(ClassificationFile, LoadsWhatPythonWrote) {
  auto data = load_classification_file(dir_.file("good.pt"));
  EXPECT_EQ(data->size(), 10);
  auto b = data->gather(torch::tensor({9, 0}, torch::kLong));
  EXPECT_TRUE(torch::equal(b.input, torch::tensor({{6.75f, 7.0f, 7.25f}, {0.0f, 0.25f, 0.5f}})));
  EXPECT_TRUE(torch::equal(b.target, torch::tensor({0, 0}, torch::kLong)));
  EXPECT_EQ(load_classification_file(dir_.file("good64.pt"))->gather(torch::tensor({1}, torch::kLong)).input.scalar_type(),
            torch::kDouble);
  EXPECT_EQ(load_classification_file(dir_.file("image.pt"))->gather(torch::tensor({1}, torch::kLong)).input.sizes().vec(),
            (std::vector<int64_t>{1, 1, 2, 2}));
}

TEST_F(ClassificationFile, ClearErrors) {
  EXPECT_NE(error_of("tensor.pt").find("expected a dict"), std::string::npos);
  EXPECT_NE(error_of("no_y.pt").find("missing key \"y\""), std::string::npos);
  EXPECT_NE(error_of("no_x.pt").find("missing key \"x\""), std::string::npos);
  EXPECT_NE(error_of("y_float.pt").find("\"y\" must be an int64"), std::string::npos);
  EXPECT_NE(error_of("x_int.pt").find("\"x\" must be a floating-point"), std::string::npos);
  EXPECT_NE(error_of("mismatch.pt").find("10 samples but \"y\" has 9"), std::string::npos);
  EXPECT_NE(error_of("garbage.pt").find("not a torch.save"), std::string::npos);
  EXPECT_NE(error_of("absent.pt").find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace ddp::train
