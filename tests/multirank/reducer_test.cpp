// The DDP reducer and wrapper, ranks as threads: gradients after the reducer
// must equal those of one module doing the global batch. Runs over an
// in-process collective (thread_collective.h) and over real Gloo on loopback.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "ddp/common/store.h"
#include "ddp/runtime/distributed_data_parallel.h"
#include "ddp/runtime/gloo_collective.h"
#include "thread_collective.h"

namespace ddp {
namespace {

class TorchEnvironment : public ::testing::Environment {
 public:
  void SetUp() override { torch::set_num_threads(1); }
};
const ::testing::Environment* const kTorchEnvironment =
    ::testing::AddGlobalTestEnvironment(new TorchEnvironment);

constexpr int64_t kIn = 8;
constexpr int64_t kOut = 4;
constexpr int64_t kBatch = 24;

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(int64_t hidden = 16, bool with_unused = false) {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    fc3 = register_module("fc3", torch::nn::Linear(hidden, kOut));
    if (with_unused) extra = register_module("extra", torch::nn::Linear(hidden, kOut));
    shift = register_buffer("shift", torch::zeros({kIn}, torch::kDouble));
    to(torch::kDouble);
  }
  torch::Tensor forward(torch::Tensor x, bool use_extra = false) {
    x = torch::tanh(fc1(x + shift));
    x = torch::tanh(fc2(x));
    return use_extra ? fc3(x) + extra(x) : fc3(x);
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, extra{nullptr};
  torch::Tensor shift;
};
TORCH_MODULE(Mlp);

// torch's default generator is process-wide: ranks build modules one at a time.
std::mutex& rng_mutex() {
  static std::mutex m;
  return m;
}

Mlp make_rank_module(int rank, int64_t hidden = 16, bool with_unused = false) {
  std::lock_guard<std::mutex> lock(rng_mutex());
  torch::manual_seed(100 + rank);  // different on every rank: DDP must broadcast rank 0's
  Mlp m(hidden, with_unused);
  torch::NoGradGuard no_grad;
  m->shift.fill_(0.1 * rank);
  return m;
}

struct Data {
  torch::Tensor x, y;
};

Data make_data() {
  std::lock_guard<std::mutex> lock(rng_mutex());
  torch::manual_seed(7);
  Data d;
  d.x = torch::randn({kBatch, kIn}, torch::kDouble);
  d.y = torch::randn({kBatch, kOut}, torch::kDouble);
  return d;
}

using NamedTensors = std::map<std::string, torch::Tensor>;

NamedTensors snapshot_params(torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& item : m.named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

NamedTensors snapshot_grads(torch::nn::Module& m) {
  NamedTensors out;
  for (const auto& item : m.named_parameters()) {
    const auto& g = item.value().grad();
    out[item.key()] = g.defined() ? g.detach().clone() : torch::Tensor();
  }
  return out;
}

void sgd_step(torch::nn::Module& m, double lr) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) {
    if (p.grad().defined()) p.sub_(lr * p.grad());
  }
}

void zero_grads(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& p : m.parameters()) {
    if (p.grad().defined()) p.mutable_grad().zero_();  // in place: bucket views stay views
  }
}

enum class Backend { kThreads, kGloo };

// Runs fn(rank, collective) on `world` threads; rethrows the first rank's error.
void run_ranks(int world, Backend backend, const std::function<void(int, std::shared_ptr<Collective>)>& fn) {
  auto group = std::make_shared<testing::ThreadGroup>(world);
  auto store = make_in_memory_store();
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<Collective> c;
        if (backend == Backend::kThreads) {
          c = std::make_shared<testing::ThreadCollective>(group, r);
        } else {
          GlooOptions opts;
          opts.timeout = std::chrono::seconds(60);
          c = make_gloo_collective(make_prefix_store(store, "reducer_test"), r, world, opts);
        }
        fn(r, c);
        c->barrier()->wait(std::chrono::seconds(60));
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

struct Scenario {
  int world = 2;
  DdpOptions options;
  int iterations = 1;
  int micro_steps = 1;  // > 1: the first micro_steps-1 under no_sync
  bool with_unused = false;
  double tolerance = 1e-6;
  Backend backend = Backend::kThreads;
};

struct RankOutcome {
  NamedTensors initial;             // parameters right after construction
  std::vector<NamedTensors> grads;  // per iteration
  std::vector<PlannedBucket> first_layout;
  std::vector<PlannedBucket> last_layout;
  std::vector<CollectiveRecord> record;
  bool rebuilt = false;
  bool grads_are_bucket_views = true;
};

std::vector<RankOutcome> run_scenario(const Scenario& s, const Data& data) {
  std::vector<RankOutcome> out(static_cast<size_t>(s.world));
  const int64_t per_rank = kBatch / s.world;
  const int64_t per_micro = per_rank / s.micro_steps;
  run_ranks(s.world, s.backend, [&](int rank, std::shared_ptr<Collective> c) {
    RankOutcome& o = out[static_cast<size_t>(rank)];
    Mlp net = make_rank_module(rank, 16, s.with_unused);
    DistributedDataParallel ddp(net, c, s.options);
    o.initial = snapshot_params(*net);
    o.first_layout = ddp.reducer().buckets();
    for (int it = 0; it < s.iterations; ++it) {
      zero_grads(*net);
      for (int m = 0; m < s.micro_steps; ++m) {
        const int64_t start = rank * per_rank + m * per_micro;
        auto x = data.x.narrow(0, start, per_micro);
        auto y = data.y.narrow(0, start, per_micro);
        if (m + 1 < s.micro_steps) {
          auto guard = ddp.no_sync();
          (torch::mse_loss(ddp.forward(x), y) / s.micro_steps).backward();
        } else {
          (torch::mse_loss(ddp(x), y) / s.micro_steps).backward();
        }
      }
      o.grads.push_back(snapshot_grads(*net));
      sgd_step(*net, 0.05);
    }
    o.last_layout = ddp.reducer().buckets();
    o.rebuilt = ddp.reducer().buckets_rebuilt();
    o.record = c->flight_record().tail(10000);
    for (const auto& p : net->parameters()) {
      if (!p.grad().defined()) continue;
      bool inside = false;
      for (size_t b = 0; b < o.last_layout.size(); ++b) {
        auto flat = ddp.reducer().bucket_tensor(b);
        auto* lo = static_cast<char*>(flat.data_ptr());
        auto* ptr = static_cast<char*>(p.grad().data_ptr());
        inside = inside || (ptr >= lo && ptr < lo + flat.numel() * flat.element_size());
      }
      o.grads_are_bucket_views = o.grads_are_bucket_views && inside;
    }
  });
  return out;
}

// One module, the global batch, the same steps.
std::vector<NamedTensors> reference(const Scenario& s, const Data& data, const NamedTensors& initial) {
  Mlp net(16, s.with_unused);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : net->named_parameters()) item.value().copy_(initial.at(item.key()));
  }
  std::vector<NamedTensors> grads;
  for (int it = 0; it < s.iterations; ++it) {
    for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
    torch::mse_loss(net->forward(data.x), data.y).backward();
    grads.push_back(snapshot_grads(*net));
    sgd_step(*net, 0.05);
  }
  return grads;
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, double rel, const std::string& what) {
  if (!want.defined()) {
    EXPECT_FALSE(got.defined()) << what << ": a gradient where the single process has none";
    return;
  }
  ASSERT_TRUE(got.defined()) << what << ": no gradient";
  const torch::Tensor& w = want;
  const double err = (got - w).norm().item<double>();
  const double scale = w.norm().item<double>();
  EXPECT_LE(err, rel * std::max(scale, 1e-300)) << what << ": |diff| " << err << " |want| " << scale;
}

void check_against_reference(const Scenario& s, const std::vector<RankOutcome>& outcomes, const Data& data) {
  const auto ref = reference(s, data, outcomes[0].initial);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    // Construction broadcast rank 0's parameters.
    for (const auto& [name, value] : outcomes[r].initial) {
      EXPECT_TRUE(torch::equal(value, outcomes[0].initial.at(name))) << "rank " << r << " " << name;
    }
    ASSERT_EQ(outcomes[r].grads.size(), ref.size());
    for (size_t it = 0; it < ref.size(); ++it) {
      for (const auto& [name, want] : ref[it]) {
        expect_close(outcomes[r].grads[it].at(name), want, s.tolerance,
                     "rank " + std::to_string(r) + " iteration " + std::to_string(it) + " " + name);
      }
    }
  }
}

std::vector<int> all_reduce_buckets(const std::vector<CollectiveRecord>& record) {
  std::vector<int> out;
  for (const auto& rec : record) {
    if (rec.op == "all_reduce") out.push_back(rec.bucket);
  }
  return out;
}

// ---------------------------------------------------------------------------

struct CapCase {
  const char* name;
  int64_t first_cap_bytes;
  int64_t cap_bytes;
  size_t expected_buckets;  // 6 parameters: 1, several, one per parameter
};

void PrintTo(const CapCase& c, std::ostream* os) { *os << c.name; }

class ReducerCaps : public ::testing::TestWithParam<std::tuple<CapCase, int>> {};

TEST_P(ReducerCaps, GradientsEqualTheGlobalBatch) {
  const auto& [caps, world] = GetParam();
  Scenario s;
  s.world = world;
  s.iterations = 2;  // the second runs on the rebuilt layout
  s.options.first_bucket_cap_mb = static_cast<double>(caps.first_cap_bytes) / (1 << 20);
  s.options.bucket_cap_mb = static_cast<double>(caps.cap_bytes) / (1 << 20);
  const Data data = make_data();
  const auto outcomes = run_scenario(s, data);
  check_against_reference(s, outcomes, data);
  for (const auto& o : outcomes) {
    EXPECT_EQ(o.first_layout.size(), caps.expected_buckets);
    EXPECT_TRUE(o.rebuilt);
    EXPECT_EQ(o.last_layout.size(), outcomes[0].last_layout.size());
    for (size_t b = 0; b < o.last_layout.size(); ++b) {
      EXPECT_EQ(o.last_layout[b].params, outcomes[0].last_layout[b].params) << "ranks agree on the rebuilt layout";
    }
    // Every all_reduce is tagged with its bucket, issued in bucket order.
    const auto tags = all_reduce_buckets(o.record);
    ASSERT_EQ(tags.size(), o.first_layout.size() + o.last_layout.size());
    for (size_t b = 0; b < o.first_layout.size(); ++b) EXPECT_EQ(tags[b], static_cast<int>(b));
    for (size_t b = 0; b < o.last_layout.size(); ++b) {
      EXPECT_EQ(tags[o.first_layout.size() + b], static_cast<int>(b));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Buckets, ReducerCaps,
    ::testing::Combine(::testing::Values(CapCase{"one", 1 << 20, 25 << 20, 1}, CapCase{"several", 600, 1500, 3},
                                         CapCase{"per_param", 1, 1, 6}),
                       ::testing::Values(2, 3)),
    [](const ::testing::TestParamInfo<std::tuple<CapCase, int>>& p) {
      return std::string(std::get<0>(p.param).name) + "_world" + std::to_string(std::get<1>(p.param));
    });

TEST(Reducer, FourRanksThreeIterations) {
  Scenario s;
  s.world = 4;
  s.iterations = 3;
  s.options.first_bucket_cap_mb = 600.0 / (1 << 20);
  s.options.bucket_cap_mb = 1500.0 / (1 << 20);
  const Data data = make_data();
  check_against_reference(s, run_scenario(s, data), data);
}

TEST(Reducer, FindUnusedParametersLeavesGloballyUnusedGradsUndefined) {
  Scenario s;
  s.world = 3;
  s.iterations = 2;
  s.with_unused = true;
  s.options.find_unused_parameters = true;
  s.options.first_bucket_cap_mb = 600.0 / (1 << 20);
  s.options.bucket_cap_mb = 1500.0 / (1 << 20);
  const Data data = make_data();
  const auto outcomes = run_scenario(s, data);
  check_against_reference(s, outcomes, data);
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.grads[0].at("extra.weight").defined());
    EXPECT_FALSE(o.grads[1].at("extra.bias").defined());
    // The used-parameter all_reduce is tagged -1, after the buckets.
    std::vector<int> expected;
    for (size_t b = 0; b < o.first_layout.size(); ++b) expected.push_back(static_cast<int>(b));
    expected.push_back(-1);
    for (size_t b = 0; b < o.last_layout.size(); ++b) expected.push_back(static_cast<int>(b));
    expected.push_back(-1);
    EXPECT_EQ(all_reduce_buckets(o.record), expected);
  }
}

// A parameter that only rank 0 uses: every rank gets rank 0's gradient / world.
TEST(Reducer, ParameterUsedOnOneRankOnly) {
  constexpr int kWorld = 3;
  const int64_t per_rank = kBatch / kWorld;
  const Data data = make_data();
  for (bool views : {false, true}) {
    std::vector<NamedTensors> grads(kWorld);
    NamedTensors initial;
    run_ranks(kWorld, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
      Mlp net = make_rank_module(rank, 16, /*with_unused=*/true);
      DdpOptions opts;
      opts.find_unused_parameters = true;
      opts.gradient_as_bucket_view = views;
      DistributedDataParallel ddp(net, c, opts);
      if (rank == 0) initial = snapshot_params(*net);
      auto x = data.x.narrow(0, rank * per_rank, per_rank);
      auto y = data.y.narrow(0, rank * per_rank, per_rank);
      torch::mse_loss(ddp(x, rank == 0), y).backward();
      grads[static_cast<size_t>(rank)] = snapshot_grads(*net);
    });
    Mlp ref(16, true);
    {
      torch::NoGradGuard no_grad;
      for (auto& item : ref->named_parameters()) item.value().copy_(initial.at(item.key()));
    }
    torch::Tensor loss = torch::zeros({}, torch::kDouble);
    for (int r = 0; r < kWorld; ++r) {
      auto x = data.x.narrow(0, r * per_rank, per_rank);
      auto y = data.y.narrow(0, r * per_rank, per_rank);
      loss = loss + torch::mse_loss(ref->forward(x, r == 0), y) / kWorld;
    }
    loss.backward();
    const NamedTensors want = snapshot_grads(*ref);
    for (int r = 0; r < kWorld; ++r) {
      for (const auto& [name, w] : want) {
        expect_close(grads[static_cast<size_t>(r)].at(name), w, 1e-6,
                     std::string(views ? "views " : "copies ") + "rank " + std::to_string(r) + " " + name);
      }
    }
  }
}

TEST(Reducer, UnusedParameterWithoutFindUnusedIsAnErrorNamingIt) {
  const Data data = make_data();
  run_ranks(2, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank, 16, /*with_unused=*/true);
    DdpOptions opts;
    opts.first_bucket_cap_mb = 600.0 / (1 << 20);
    opts.bucket_cap_mb = 1500.0 / (1 << 20);
    DistributedDataParallel ddp(net, c, opts);
    auto x = data.x.narrow(0, rank * 12, 12);
    auto y = data.y.narrow(0, rank * 12, 12);
    const std::string first = error_of([&] { torch::mse_loss(ddp(x), y).backward(); });
    EXPECT_NE(first.find("'extra.weight'"), std::string::npos) << first;
    EXPECT_NE(first.find("extra.bias"), std::string::npos) << first;
    EXPECT_NE(first.find("find_unused_parameters"), std::string::npos) << first;
    const std::string second = error_of([&] { torch::mse_loss(ddp(x), y).backward(); });
    EXPECT_NE(second.find("before the previous gradient reduction finished"), std::string::npos) << second;
  });
}

TEST(Reducer, AccumulatesOverMicroStepsWithoutCommunicating) {
  Scenario s;
  s.world = 2;
  s.iterations = 2;
  s.micro_steps = 3;
  const Data data = make_data();
  const auto outcomes = run_scenario(s, data);
  check_against_reference(s, outcomes, data);
  for (const auto& o : outcomes) {
    // One bucket, one all_reduce per synchronized step, none in the no_sync ones.
    EXPECT_EQ(all_reduce_buckets(o.record), (std::vector<int>{0, 0}));
  }
}

TEST(Reducer, AccumulationWithGradientAsBucketView) {
  Scenario s;
  s.world = 2;
  s.iterations = 2;
  s.micro_steps = 2;
  s.options.gradient_as_bucket_view = true;
  s.options.first_bucket_cap_mb = 600.0 / (1 << 20);
  s.options.bucket_cap_mb = 1500.0 / (1 << 20);
  const Data data = make_data();
  check_against_reference(s, run_scenario(s, data), data);
}

TEST(Reducer, GradientAsBucketViewMakesGradsViews) {
  Scenario s;
  s.world = 3;
  s.iterations = 3;
  s.options.gradient_as_bucket_view = true;
  s.options.first_bucket_cap_mb = 600.0 / (1 << 20);
  s.options.bucket_cap_mb = 1500.0 / (1 << 20);
  const Data data = make_data();
  const auto outcomes = run_scenario(s, data);
  check_against_reference(s, outcomes, data);
  for (const auto& o : outcomes) EXPECT_TRUE(o.grads_are_bucket_views);
}

TEST(Reducer, Fp16HookWithinHalfPrecision) {
  Scenario s;
  s.world = 3;
  s.options.comm_hook = CommHook::kFp16;
  s.options.first_bucket_cap_mb = 600.0 / (1 << 20);
  s.options.bucket_cap_mb = 1500.0 / (1 << 20);
  s.tolerance = 2e-3;
  const Data data = make_data();
  const auto outcomes = run_scenario(s, data);
  check_against_reference(s, outcomes, data);
  for (const auto& rec : outcomes[0].record) {
    if (rec.op == "all_reduce") {
      EXPECT_EQ(rec.dtype, "Half");
    }
  }
}

TEST(Reducer, Bf16HookWithinBfloat16Precision) {
  Scenario s;
  s.world = 2;
  s.options.comm_hook = CommHook::kBf16;
  s.tolerance = 1.5e-2;
  const Data data = make_data();
  const auto outcomes = run_scenario(s, data);
  check_against_reference(s, outcomes, data);
  for (const auto& rec : outcomes[0].record) {
    if (rec.op == "all_reduce") {
      EXPECT_EQ(rec.dtype, "BFloat16");
    }
  }
}

TEST(Reducer, MismatchedParameterShapesNameTheFirstMismatch) {
  run_ranks(3, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank, rank == 2 ? 12 : 16);
    const std::string err = error_of([&] { DistributedDataParallel ddp(net, c, DdpOptions{}); });
    EXPECT_NE(err.find("'fc1.weight'"), std::string::npos) << err;
    EXPECT_NE(err.find("[16, 8]"), std::string::npos) << err;
    EXPECT_NE(err.find("[12, 8] Double on rank 2"), std::string::npos) << err;
  });
}

TEST(Reducer, MismatchedParameterCountIsAnError) {
  run_ranks(2, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank, 16, /*with_unused=*/rank == 1);
    const std::string err = error_of([&] { DistributedDataParallel ddp(net, c, DdpOptions{}); });
    EXPECT_NE(err.find("rank 1 has 8 parameters that require grad but rank 0 has 6"), std::string::npos) << err;
  });
}

TEST(Reducer, BuffersAreBroadcastFromRankZeroBeforeForward) {
  const Data data = make_data();
  run_ranks(3, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank);
    DistributedDataParallel ddp(net, c, DdpOptions{});
    EXPECT_EQ(net->shift.abs().max().item<double>(), 0.0);  // rank 0's value at construction
    {
      torch::NoGradGuard no_grad;
      net->shift.fill_(rank == 0 ? 0.5 : -1.0);
    }
    ddp(data.x.narrow(0, rank * 8, 8));
    EXPECT_EQ(net->shift.min().item<double>(), 0.5);
    EXPECT_EQ(net->shift.max().item<double>(), 0.5);
  });
}

// A node whose backward runs a second, nested backward through the same
// parameter: that parameter becomes ready twice in one reduction.
thread_local torch::Tensor reused_param;
struct Reenter : torch::autograd::Function<Reenter> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, torch::Tensor x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list grads) {
    torch::AutoGradMode enable(true);
    (reused_param * 3).sum().backward();
    return {grads[0]};
  }
};

struct OneParamImpl : torch::nn::Module {
  OneParamImpl() { w = register_parameter("w", torch::ones({3}, torch::kDouble)); }
  torch::Tensor w;
};
TORCH_MODULE(OneParam);

TEST(Reducer, ParameterReadyTwiceIsAnError) {
  run_ranks(2, Backend::kThreads, [&](int /*rank*/, std::shared_ptr<Collective> c) {
    OneParam net;
    DistributedDataParallel ddp(net, c, DdpOptions{});
    reused_param = net->w;
    auto x = torch::ones({3}, torch::kDouble).requires_grad_(true);
    auto y = Reenter::apply(x);  // created first: its backward runs after w's gradient is accumulated
    auto loss = y.sum() + (net->w * 2).sum();
    const std::string err = error_of([&] { loss.backward(); });
    EXPECT_NE(err.find("'w' was marked ready twice"), std::string::npos) << err;
    reused_param = torch::Tensor();
  });
}

TEST(Reducer, AllReduceStartsWhileBackwardContinues) {
  const Data data = make_data();
  run_ranks(2, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank);
    DdpOptions opts;
    opts.first_bucket_cap_mb = 1.0 / (1 << 20);  // one bucket per parameter
    opts.bucket_cap_mb = 1.0 / (1 << 20);
    DistributedDataParallel ddp(net, c, opts);
    // fc1.weight's gradient is the last to be computed; by then the buckets
    // of fc3 and fc2 must already have been handed to the collective.
    uint64_t enqueued_before_fc1 = 0;
    net->fc1->weight.register_hook([&](torch::Tensor g) {
      enqueued_before_fc1 = c->flight_record().last_enqueued();
      return g;
    });
    auto loss = torch::mse_loss(ddp(data.x.narrow(0, rank * 12, 12)), data.y.narrow(0, rank * 12, 12));
    const uint64_t before = c->flight_record().last_enqueued();
    loss.backward();
    EXPECT_GE(enqueued_before_fc1, before + 4);
    // 6 all_reduces, then the one broadcast of the ready order for the rebuild.
    EXPECT_EQ(c->flight_record().last_enqueued(), before + 7);
  });
}

// A node whose backward throws, after the model's gradients were reduced.
struct Boom : torch::autograd::Function<Boom> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, torch::Tensor x) { return x.clone(); }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list /*grads*/) {
    throw std::runtime_error("boom in backward");
  }
};

TEST(Reducer, ForwardAfterAnInterruptedBackwardIsAnError) {
  const Data data = make_data();
  run_ranks(2, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank);
    DistributedDataParallel ddp(net, c, DdpOptions{});
    auto x = data.x.narrow(0, rank * 12, 12);
    auto y = data.y.narrow(0, rank * 12, 12);
    auto boom = Boom::apply(torch::ones({1}, torch::kDouble).requires_grad_(true));  // runs last in backward
    auto loss = torch::mse_loss(ddp(x), y) + boom.sum();
    EXPECT_NE(error_of([&] { loss.backward(); }).find("boom in backward"), std::string::npos);
    const std::string err = error_of([&] { ddp(x); });
    EXPECT_NE(err.find("previous gradient reduction finished"), std::string::npos) << err;
    EXPECT_NE(err.find("interrupted"), std::string::npos) << err;
  });
}

TEST(Reducer, TrainsWithATorchOptimizer) {
  const Data data = make_data();
  std::vector<NamedTensors> finals(3);
  std::vector<double> first_loss(3), last_loss(3);
  run_ranks(3, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank);
    DdpOptions opts;
    opts.gradient_as_bucket_view = true;
    opts.first_bucket_cap_mb = 600.0 / (1 << 20);
    opts.bucket_cap_mb = 1500.0 / (1 << 20);
    DistributedDataParallel ddp(net, c, opts);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    auto x = data.x.narrow(0, rank * 8, 8);
    auto y = data.y.narrow(0, rank * 8, 8);
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      auto loss = torch::mse_loss(ddp(x), y);
      loss.backward();
      opt.step();
      if (step == 0) first_loss[static_cast<size_t>(rank)] = loss.item<double>();
      last_loss[static_cast<size_t>(rank)] = loss.item<double>();
    }
    finals[static_cast<size_t>(rank)] = snapshot_params(*net);
  });
  for (size_t r = 0; r < 3; ++r) {
    EXPECT_LT(last_loss[r], first_loss[r]);
    for (const auto& [name, value] : finals[r]) {
      EXPECT_TRUE(torch::allclose(value, finals[0].at(name), 1e-12, 1e-12)) << "rank " << r << " " << name;
    }
  }
}

TEST(Reducer, TwoBackwardsInARowSumTheirAverages) {
  constexpr int kWorld = 2;
  const int64_t per_rank = kBatch / kWorld;
  const Data data = make_data();
  std::vector<NamedTensors> grads(kWorld);
  NamedTensors initial;
  run_ranks(kWorld, Backend::kThreads, [&](int rank, std::shared_ptr<Collective> c) {
    Mlp net = make_rank_module(rank);
    DistributedDataParallel ddp(net, c, DdpOptions{});
    if (rank == 0) initial = snapshot_params(*net);
    auto x = data.x.narrow(0, rank * per_rank, per_rank);
    auto y = data.y.narrow(0, rank * per_rank, per_rank);
    torch::mse_loss(ddp(x), y).backward();
    (2.0 * torch::mse_loss(ddp(x * 0.5), y)).backward();
    grads[static_cast<size_t>(rank)] = snapshot_grads(*net);
  });
  Mlp ref;
  {
    torch::NoGradGuard no_grad;
    for (auto& item : ref->named_parameters()) item.value().copy_(initial.at(item.key()));
  }
  (torch::mse_loss(ref->forward(data.x), data.y) + 2.0 * torch::mse_loss(ref->forward(data.x * 0.5), data.y))
      .backward();
  const NamedTensors want = snapshot_grads(*ref);
  for (int r = 0; r < kWorld; ++r) {
    for (const auto& [name, w] : want) {
      expect_close(grads[static_cast<size_t>(r)].at(name), w, 1e-6, "rank " + std::to_string(r) + " " + name);
    }
  }
}

TEST(Reducer, WorldOfOneIsPlainTraining) {
  Scenario s;
  s.world = 1;
  s.iterations = 2;
  const Data data = make_data();
  check_against_reference(s, run_scenario(s, data), data);
}

// --- the same over real Gloo on loopback -----------------------------------

TEST(ReducerGloo, GradientsEqualTheGlobalBatch) {
  Scenario s;
  s.world = 3;
  s.iterations = 2;
  s.backend = Backend::kGloo;
  s.options.first_bucket_cap_mb = 600.0 / (1 << 20);
  s.options.bucket_cap_mb = 1500.0 / (1 << 20);
  const Data data = make_data();
  const auto outcomes = run_scenario(s, data);
  check_against_reference(s, outcomes, data);
  EXPECT_EQ(all_reduce_buckets(outcomes[0].record), (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

// The wrapper takes the backend's unique_ptr as it comes (compile-time check).
[[maybe_unused]] void construct_from_unique_ptr(std::shared_ptr<Store> store) {
  Mlp net;
  DistributedDataParallel ddp(net, make_gloo_collective(std::move(store), 0, 1), DdpOptions{});
  static_assert(std::is_same_v<decltype(ddp), DistributedDataParallel<MlpImpl>>);
}

TEST(ReducerGloo, AccumulationAndBucketViews) {
  Scenario s;
  s.world = 2;
  s.iterations = 2;
  s.micro_steps = 2;
  s.backend = Backend::kGloo;
  s.options.gradient_as_bucket_view = true;
  s.options.first_bucket_cap_mb = 1.0 / (1 << 20);
  s.options.bucket_cap_mb = 1.0 / (1 << 20);
  const Data data = make_data();
  check_against_reference(s, run_scenario(s, data), data);
}

TEST(ReducerGloo, UnusedParametersAndFp16) {
  Scenario s;
  s.world = 2;
  s.backend = Backend::kGloo;
  s.with_unused = true;
  s.options.find_unused_parameters = true;
  s.options.comm_hook = CommHook::kFp16;
  s.tolerance = 2e-3;
  const Data data = make_data();
  check_against_reference(s, run_scenario(s, data), data);
}

}  // namespace
}  // namespace ddp
