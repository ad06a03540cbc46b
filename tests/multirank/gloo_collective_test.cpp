// The Gloo backend with real TCP on loopback (and its shared-memory
// all-reduce, on and off): ranks are threads of this process meeting through
// one in-memory store. Every test is bounded (small
// Gloo timeouts where a failure is expected) and joins its threads.
#include "ddp/runtime/gloo_collective.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ddp/common/store.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;
using RankFn = std::function<void(Collective&, int rank)>;

// Whether all_reduce may use shared memory; the parameterized tests run both ways.
bool g_shared_memory = true;

GlooOptions options_with_timeout(Duration timeout) {
  GlooOptions o;
  o.timeout = timeout;
  o.shared_memory = g_shared_memory;
  return o;
}

// Runs fn on `world` threads, each with its own collective; any exception a
// rank throws fails the test naming the rank.
void run_ranks(int world, const RankFn& fn, GlooOptions options = options_with_timeout(15s)) {
  auto store = make_in_memory_store();
  std::vector<std::string> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto c = make_gloo_collective(make_prefix_store(store, "gloo"), r, world, options);
        EXPECT_EQ(c->rank(), r);
        EXPECT_EQ(c->size(), world);
        EXPECT_EQ(c->backend(), "gloo");
        fn(*c, r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r << " of " << world;
}

// Values exact in every dtype under test (small integers).
at::Tensor pattern(int64_t n, at::ScalarType type, int rank) {
  return (at::arange(n, at::kLong).remainder(17) + rank).to(type);
}

at::Tensor expected_sum(int64_t n, at::ScalarType type, int world) {
  return (at::arange(n, at::kLong).remainder(17) * world + world * (world - 1) / 2).to(type);
}

// (world size, shared-memory all-reduce allowed)
class GlooWorld : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  void SetUp() override { g_shared_memory = std::get<1>(GetParam()); }
  void TearDown() override { g_shared_memory = true; }
};

TEST_P(GlooWorld, AllReduceSumIsExact) {
  const int world = std::get<0>(GetParam());
  run_ranks(world, [world](Collective& c, int rank) {
    for (auto type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kInt, at::kLong, at::kChar, at::kByte}) {
      for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4099}}) {
        at::Tensor t = pattern(n, type, rank);
        ASSERT_TRUE(c.all_reduce(t, ReduceOp::kSum)->wait(10s));
        EXPECT_EQ(t.scalar_type(), type);
        EXPECT_TRUE(at::equal(t, expected_sum(n, type, world)))
            << "dtype " << c10::toString(type) << " n=" << n << " rank " << rank;
      }
    }
    // 1 MiB of float32, and a 0-dim tensor.
    const int64_t n = (1 << 20) / 4;
    at::Tensor big = pattern(n, at::kFloat, rank);
    ASSERT_TRUE(c.all_reduce(big, ReduceOp::kSum)->wait(10s));
    EXPECT_TRUE(at::equal(big, expected_sum(n, at::kFloat, world)));
    at::Tensor scalar = at::scalar_tensor(rank + 1.0, at::kDouble);
    ASSERT_TRUE(c.all_reduce(scalar, ReduceOp::kSum)->wait(10s));
    EXPECT_EQ(scalar.item<double>(), world * (world + 1) / 2.0);
  });
}

TEST_P(GlooWorld, AllReduceAverage) {
  const int world = std::get<0>(GetParam());
  run_ranks(world, [world](Collective& c, int rank) {
    for (auto type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16}) {
      // 2(r+1) averages to world+1: exact in every floating dtype here.
      at::Tensor t = at::full({5, 3}, 2.0 * (rank + 1), at::TensorOptions().dtype(type));
      ASSERT_TRUE(c.all_reduce(t, ReduceOp::kAvg)->wait(10s));
      EXPECT_TRUE(at::equal(t, at::full({5, 3}, world + 1.0, at::TensorOptions().dtype(type))))
          << c10::toString(type);
    }
    // Random float64: the mean of what every rank had, to rounding.
    at::Tensor sum = at::zeros({1000}, at::kDouble);
    for (int r = 0; r < world; ++r) sum += at::sin(at::arange(1000, at::kDouble) * (r + 1));
    at::Tensor mine = at::sin(at::arange(1000, at::kDouble) * (rank + 1));
    ASSERT_TRUE(c.all_reduce(mine, ReduceOp::kAvg)->wait(10s));
    EXPECT_TRUE(at::allclose(mine, sum / world, 1e-12, 1e-12));
  });
}

TEST_P(GlooWorld, AllReduceNonContiguous) {
  const int world = std::get<0>(GetParam());
  run_ranks(world, [world](Collective& c, int rank) {
    for (auto type : {at::kFloat, at::kHalf, at::kLong}) {
      // A transposed view and a strided slice: only the viewed elements change.
      at::Tensor base = pattern(12, type, rank).view({3, 4});
      at::Tensor view = base.t();
      ASSERT_FALSE(view.is_contiguous());
      ASSERT_TRUE(c.all_reduce(view, ReduceOp::kSum)->wait(10s));
      EXPECT_TRUE(at::equal(base, expected_sum(12, type, world).view({3, 4}))) << c10::toString(type);

      at::Tensor row = pattern(10, type, rank);
      at::Tensor every_other = row.slice(0, 0, 10, 2);
      ASSERT_TRUE(c.all_reduce(every_other, ReduceOp::kSum)->wait(10s));
      at::Tensor want = pattern(10, type, rank);
      want.slice(0, 0, 10, 2).copy_(expected_sum(10, type, world).slice(0, 0, 10, 2));
      EXPECT_TRUE(at::equal(row, want)) << c10::toString(type);
    }
  });
}

TEST_P(GlooWorld, BroadcastFromEveryRoot) {
  const int world = std::get<0>(GetParam());
  run_ranks(world, [world](Collective& c, int rank) {
    for (int root = 0; root < world; ++root) {
      at::Tensor t = pattern(1000, at::kFloat, rank);
      ASSERT_TRUE(c.broadcast(t, root)->wait(10s));
      EXPECT_TRUE(at::equal(t, pattern(1000, at::kFloat, root))) << "root " << root;

      at::Tensor l = pattern(33, at::kLong, rank * 10);
      ASSERT_TRUE(c.broadcast(l, root)->wait(10s));
      EXPECT_TRUE(at::equal(l, pattern(33, at::kLong, root * 10))) << "root " << root;

      at::Tensor base = pattern(20, at::kDouble, rank).view({4, 5});
      at::Tensor view = base.t();
      ASSERT_TRUE(c.broadcast(view, root)->wait(10s));
      EXPECT_TRUE(at::equal(base, pattern(20, at::kDouble, root).view({4, 5}))) << "root " << root;

      at::Tensor empty = at::empty({0}, at::kFloat);
      ASSERT_TRUE(c.broadcast(empty, root)->wait(10s));
    }
  });
}

TEST_P(GlooWorld, AllGatherInRankOrder) {
  const int world = std::get<0>(GetParam());
  run_ranks(world, [world](Collective& c, int rank) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}}) {
      at::Tensor in = at::full({n}, rank * 3 + 1, at::kInt);
      at::Tensor out = at::full({world, n}, -1, at::kInt);
      ASSERT_TRUE(c.all_gather(in, out)->wait(10s));
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(at::equal(out[r], at::full({n}, r * 3 + 1, at::kInt))) << "slot " << r << " n=" << n;
      }
    }
    // Non-contiguous input and a flat double output.
    at::Tensor base = at::arange(6, at::kDouble).view({2, 3}) + 100 * rank;
    at::Tensor flat = at::zeros({world * 6}, at::kDouble);
    ASSERT_TRUE(c.all_gather(base.t(), flat)->wait(10s));
    for (int r = 0; r < world; ++r) {
      at::Tensor want = (at::arange(6, at::kDouble).view({2, 3}) + 100 * r).t().contiguous().view({6});
      EXPECT_TRUE(at::equal(flat.slice(0, r * 6, (r + 1) * 6), want)) << "slot " << r;
    }
    EXPECT_THROW(c.all_gather(at::zeros({3}), at::zeros({3 * world + 1})), CollectiveError);
    EXPECT_THROW(c.all_gather(at::zeros({3}), at::zeros({3 * world}, at::kDouble)), CollectiveError);
  });
}

TEST_P(GlooWorld, BarrierHoldsEveryRankUntilAllArrive) {
  const int world = std::get<0>(GetParam());
  std::atomic<int> arrived{0};
  run_ranks(world, [&](Collective& c, int rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(40 * rank));
    arrived.fetch_add(1);
    ASSERT_TRUE(c.barrier()->wait(10s));
    EXPECT_EQ(arrived.load(), world) << "rank " << rank << " left the barrier early";
  });
}

TEST_P(GlooWorld, ManyAsyncOpsRunInCallOrder) {
  const int world = std::get<0>(GetParam());
  run_ranks(world, [world](Collective& c, int rank) {
    std::vector<at::Tensor> tensors;
    std::vector<std::shared_ptr<Work>> works;
    for (int i = 0; i < 50; ++i) {
      tensors.push_back(at::full({64 + i * 97}, i * 10 + rank, at::kLong));
      works.push_back(c.all_reduce(tensors.back(), ReduceOp::kSum));
    }
    // Five in-place reductions of one tensor: only call order gives world^5.
    at::Tensor chain = at::full({1000}, 1.0, at::kDouble);
    for (int i = 0; i < 5; ++i) works.push_back(c.all_reduce(chain, ReduceOp::kSum));
    for (size_t i = 0; i < works.size(); ++i) {
      if (i > 0) {
        EXPECT_EQ(works[i]->sequence(), works[i - 1]->sequence() + 1);
      }
    }
    for (auto& w : works) ASSERT_TRUE(w->wait(15s));
    for (int i = 0; i < 50; ++i) {
      const int64_t want = int64_t{i} * 10 * world + world * (world - 1) / 2;
      EXPECT_TRUE(at::equal(tensors[i], at::full({64 + i * 97}, want, at::kLong))) << "op " << i;
    }
    double want_chain = 1;
    for (int i = 0; i < 5; ++i) want_chain *= world;
    EXPECT_TRUE(at::equal(chain, at::full({1000}, want_chain, at::kDouble)));
    for (auto& w : works) {
      EXPECT_TRUE(w->is_completed());
      EXPECT_EQ(w->error(), nullptr);
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorld, ::testing::Combine(::testing::Values(1, 2, 3, 4), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& param_info) {
                           return "world" + std::to_string(std::get<0>(param_info.param)) +
                                  (std::get<1>(param_info.param) ? "_shm" : "_tcp");
                         });

TEST(GlooCollective, RefusesNonCpuTensorsAndBadArguments) {
  run_ranks(1, [](Collective& c, int) {
    at::Tensor meta = at::empty({4}, at::TensorOptions().device(at::kMeta));
    try {
      c.all_reduce(meta, ReduceOp::kSum);
      ADD_FAILURE() << "a meta tensor was accepted";
    } catch (const CollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("meta"), std::string::npos) << e.what();
    }
    EXPECT_THROW(c.broadcast(meta, 0), CollectiveError);
    EXPECT_THROW(c.all_gather(meta, at::empty({4})), CollectiveError);
    EXPECT_THROW(c.broadcast(at::zeros({2}), 1), CollectiveError);
    EXPECT_THROW(c.broadcast(at::zeros({2}), -1), CollectiveError);
    EXPECT_THROW(c.all_reduce(at::zeros({2}, at::kLong), ReduceOp::kAvg), CollectiveError);
    EXPECT_THROW(c.all_reduce(at::zeros({2}, at::kBool), ReduceOp::kSum), CollectiveError);
    EXPECT_THROW(c.all_reduce(at::Tensor(), ReduceOp::kSum), CollectiveError);
    // Refused calls take no sequence number.
    EXPECT_EQ(c.flight_record().last_enqueued(), 0u);
  });
  EXPECT_THROW(make_gloo_collective(make_in_memory_store(), 2, 2), CollectiveError);
  EXPECT_THROW(make_gloo_collective(make_in_memory_store(), 0, 0), CollectiveError);
}

TEST(GlooCollective, RendezvousTimesOutWhenAPeerNeverComes) {
  const auto start = std::chrono::steady_clock::now();
  try {
    make_gloo_collective(make_in_memory_store(), 0, 2, options_with_timeout(500ms));
    ADD_FAILURE() << "rendezvous with an absent peer succeeded";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("rendezvous"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(GlooCollective, WaitTimesOutWhileAPeerHasNotJoined) {
  std::promise<void> rank0_checked;
  auto checked = rank0_checked.get_future();
  run_ranks(2, [&](Collective& c, int rank) {
    at::Tensor t = at::full({100}, rank + 1.0, at::kFloat);
    if (rank == 1) {
      // Join only once rank 0 has seen its wait time out (bounded).
      EXPECT_EQ(checked.wait_for(10s), std::future_status::ready);
      ASSERT_TRUE(c.all_reduce(t, ReduceOp::kSum)->wait(10s));
    } else {
      auto w = c.all_reduce(t, ReduceOp::kSum);
      EXPECT_FALSE(w->wait(200ms));
      EXPECT_FALSE(w->is_completed());
      EXPECT_EQ(w->error(), nullptr);
      const auto rec = c.flight_record().tail(1);
      ASSERT_EQ(rec.size(), 1u);
      EXPECT_EQ(rec[0].sequence, w->sequence());
      EXPECT_EQ(rec[0].state, CollectiveState::kStarted);
      rank0_checked.set_value();
      ASSERT_TRUE(w->wait(10s));
      EXPECT_TRUE(w->is_completed());
    }
    EXPECT_TRUE(at::equal(t, at::full({100}, 3.0, at::kFloat)));
  });
}

TEST(GlooCollective, DestroyedPeerMakesTheNextOpFailNotHang) {
  const int world = 3;
  std::promise<void> destroyed;
  std::shared_future<void> destroyed_f = destroyed.get_future().share();
  auto store = make_in_memory_store();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto c = make_gloo_collective(store, r, world, options_with_timeout(2s));
        at::Tensor t = at::ones({1000}, at::kFloat);
        ASSERT_TRUE(c->all_reduce(t, ReduceOp::kSum)->wait(10s));
        ASSERT_TRUE(at::equal(t, at::full({1000}, 3.0f)));
        if (r == world - 1) {
          c.reset();  // this rank leaves mid-job
          destroyed.set_value();
          return;
        }
        ASSERT_EQ(destroyed_f.wait_for(10s), std::future_status::ready);
        const auto start = std::chrono::steady_clock::now();
        auto w = c->all_reduce(t, ReduceOp::kSum);
        std::string first;
        try {
          w->wait(10s);
          ADD_FAILURE() << "rank " << r << ": all_reduce with a departed peer succeeded";
        } catch (const CollectiveError& e) {
          first = e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
        EXPECT_TRUE(w->is_completed());
        EXPECT_NE(w->error(), nullptr);
        EXPECT_NE(first.find("all_reduce #2"), std::string::npos) << first;
        if (r == 0) std::fprintf(stderr, "rank 0 got: %s\n", first.c_str());
        // Broken now: the next op fails at once, carrying the first message.
        const auto again = std::chrono::steady_clock::now();
        auto b = c->barrier();
        try {
          b->wait(10s);
          ADD_FAILURE() << "rank " << r << ": barrier on a broken communicator succeeded";
        } catch (const CollectiveError& e) {
          EXPECT_NE(std::string(e.what()).find(first), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("barrier #3"), std::string::npos) << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - again, 1s);
        const auto rec = c->flight_record().tail(3);
        ASSERT_EQ(rec.size(), 3u);
        EXPECT_EQ(rec[0].state, CollectiveState::kCompleted);
        EXPECT_EQ(rec[1].state, CollectiveState::kFailed);
        EXPECT_EQ(rec[2].state, CollectiveState::kFailed);
        EXPECT_EQ(c->flight_record().last_completed(), 1u);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(GlooCollective, OpTimesOutWhenAPeerNeverJoins) {
  std::promise<void> rank0_failed;
  auto failed = rank0_failed.get_future();
  run_ranks(
      2,
      [&](Collective& c, int rank) {
        if (rank == 1) {
          // Alive but never joins; leaves once rank 0 has given up (bounded).
          EXPECT_EQ(failed.wait_for(10s), std::future_status::ready);
          return;
        }
        const auto start = std::chrono::steady_clock::now();
        at::Tensor t = at::ones({1000}, at::kFloat);
        auto w = c.all_reduce(t, ReduceOp::kSum);
        try {
          w->wait(10s);
          ADD_FAILURE() << "all_reduce without its peer succeeded";
        } catch (const CollectiveError& e) {
          EXPECT_NE(std::string(e.what()).find("all_reduce #1"), std::string::npos) << e.what();
        }
        rank0_failed.set_value();
        const auto took = std::chrono::steady_clock::now() - start;
        EXPECT_GE(took, 900ms);
        EXPECT_LT(took, 6s);
        EXPECT_EQ(c.flight_record().tail(1)[0].state, CollectiveState::kFailed);
      },
      options_with_timeout(1s));
}

TEST(GlooCollective, DestructorDrainsQueuedOps) {
  std::vector<std::shared_ptr<Work>> kept(2);
  std::vector<at::Tensor> tensors(2);
  run_ranks(2, [&](Collective& c, int rank) {
    tensors[rank] = at::full({4096}, rank + 1.0, at::kDouble);
    for (int i = 0; i < 3; ++i) kept[rank] = c.all_reduce(tensors[rank], ReduceOp::kSum);
    // Returning destroys the collective with ops still queued.
  });
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(kept[r]->is_completed());
    EXPECT_TRUE(kept[r]->wait(0s));
    EXPECT_TRUE(at::equal(tensors[r], at::full({4096}, 3.0 * 4, at::kDouble)));
  }
}

TEST(GlooCollective, FlightRecordNumbersEveryOp) {
  run_ranks(2, [](Collective& c, int) {
    at::Tensor f = at::zeros({10}, at::kFloat);
    at::Tensor h = at::zeros({6}, at::kHalf);
    at::Tensor out = at::zeros({20}, at::kFloat);
    std::vector<std::shared_ptr<Work>> w;
    w.push_back(c.all_reduce(f, ReduceOp::kSum, CollectiveTag{7}));
    w.push_back(c.all_reduce(h, ReduceOp::kAvg));
    w.push_back(c.broadcast(f, 1));
    w.push_back(c.all_gather(f, out));
    w.push_back(c.barrier());
    for (size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(w[i]->sequence(), i + 1);
      ASSERT_TRUE(w[i]->wait(10s));
    }
    const auto rec = c.flight_record().tail(10);
    ASSERT_EQ(rec.size(), 5u);
    const char* ops[] = {"all_reduce", "all_reduce", "broadcast", "all_gather", "barrier"};
    const char* dtypes[] = {"float32", "float16", "float32", "float32", ""};
    const int64_t bytes[] = {40, 12, 40, 80, 0};
    for (size_t i = 0; i < rec.size(); ++i) {
      EXPECT_EQ(rec[i].sequence, i + 1);
      EXPECT_EQ(rec[i].op, ops[i]);
      EXPECT_EQ(rec[i].dtype, dtypes[i]);
      EXPECT_EQ(rec[i].bytes, bytes[i]);
      EXPECT_EQ(rec[i].bucket, i == 0 ? 7 : -1);
      EXPECT_EQ(rec[i].state, CollectiveState::kCompleted);
      EXPECT_LE(rec[i].enqueued, rec[i].started);
      EXPECT_LE(rec[i].started, rec[i].ended);
      if (i > 0) {
        EXPECT_LE(rec[i - 1].ended, rec[i].started);
      }
    }
    EXPECT_EQ(c.flight_record().last_completed(), 5u);
  });
}

}  // namespace
}  // namespace ddp
