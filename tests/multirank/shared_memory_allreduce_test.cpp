// The shared-memory all-reduce of the Gloo backend: exactness over many
// chunks, identical results on every rank, and that a peer which died, left or
// never came is reported promptly. Ranks are threads of this process (each
// maps the segment itself, as a process would) or, for a dying peer, a forked
// child process. Every wait is bounded; every child is reaped.
#include "shared_memory_allreduce.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <new>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ddp/common/store.h"
#include "ddp/runtime/gloo_collective.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

at::Tensor noise(int64_t n, int rank) {
  // Values whose float sums round differently in a different order.
  return at::sin(at::arange(n, at::kFloat) * (0.37f + rank)) * 1000.0f + 1e-3f * rank;
}

// Runs body(rank, group) on `world` threads, each with its own connected
// group (as separate processes would have), and joins them all.
template <typename Body>
void on_ranks(int world, Body body) {
  auto store = make_in_memory_store();
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::string why;
      auto shm = SharedMemoryAllreduce::connect(*store, r, world, 10000ms, &why);
      ASSERT_NE(shm, nullptr) << why;
      body(r, *shm);
    });
  }
  for (auto& t : threads) t.join();
}

// Up to 4 ranks each sums whole chunks; beyond, each sums a slice and copies
// the result out: both paths, over several chunks and a ragged tail.
class ShmWorld : public ::testing::TestWithParam<int> {};

TEST_P(ShmWorld, ManyChunksEqualTheSumInRankOrderOnEveryRank) {
  const int world = GetParam();
  const int64_t n = 5 * (1 << 20) + 12345;
  at::Tensor expected = noise(n, 0);
  for (int r = 1; r < world; ++r) expected = expected + noise(n, r);
  std::vector<at::Tensor> results(world);
  std::vector<size_t> slots(world);
  on_ranks(world, [&](int r, SharedMemoryAllreduce& shm) {
    slots[r] = shm.slot_bytes();
    at::Tensor t = noise(n, r);
    shm.all_reduce(t.data_ptr(), static_cast<size_t>(n), ShmDtype::kFloat32, false);
    results[r] = t;
    // A second op reuses the alternate slot set.
    at::Tensor d = at::full({1000}, 2.0 * (r + 1), at::kDouble);
    shm.all_reduce(d.data_ptr(), 1000, ShmDtype::kFloat64, true);
    EXPECT_TRUE(at::equal(d, at::full({1000}, world + 1.0, at::kDouble)));
  });
  ASSERT_LT(slots[0] * 4, static_cast<size_t>(n) * sizeof(float)) << "the test should span several chunks";
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(results[r].defined()) << "rank " << r;
    EXPECT_TRUE(at::equal(results[r], expected)) << "rank " << r << " differs from ((x0 + x1) + x2) + ...";
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShmWorld, ::testing::Values(2, 3, 6),
                         [](const ::testing::TestParamInfo<int>& p) { return "world" + std::to_string(p.param); });

// Registered buffers: the ranks read each other's memory in place. The result
// must be the very bits of the slot path: the sum in rank order, on every rank.
class RegisteredWorld : public ::testing::TestWithParam<int> {};

std::vector<std::string> ddp_shm_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ddp-shm-" + std::to_string(getpid()) + "-", 0) == 0) names.push_back(name);
  }
  return names;
}

TEST_P(RegisteredWorld, InPlaceSumsEqualTheSlotPathBitForBit) {
  const int world = GetParam();
  const int64_t n = (1 << 20) + 12345;  // not a multiple of anything
  const int64_t offset = 1000, part = 70001;  // a sub-range, as a bucket inside a bigger buffer
  std::vector<at::Tensor> whole(world), ranged(world), through_slots(world);
  std::vector<size_t> leftover_names(world, 99);
  on_ranks(world, [&](int r, SharedMemoryAllreduce& shm) {
    std::shared_ptr<void> memory = shm.register_buffer(static_cast<size_t>(n) * sizeof(float));
    ASSERT_NE(memory, nullptr);
    at::Tensor buf = at::from_blob(memory.get(), {n}, at::kFloat);
    EXPECT_TRUE(at::equal(buf, at::zeros({n}, at::kFloat))) << "a registered buffer starts zeroed";
    buf.copy_(noise(n, r));
    shm.all_reduce(buf.data_ptr(), static_cast<size_t>(n), ShmDtype::kFloat32, false);
    whole[r] = buf.clone();
    buf.copy_(noise(n, r));
    shm.all_reduce(buf.narrow(0, offset, part).data_ptr(), static_cast<size_t>(part), ShmDtype::kFloat32, false);
    ranged[r] = buf.clone();
    at::Tensor plain = noise(n, r);  // ordinary memory: the slot path
    shm.all_reduce(plain.data_ptr(), static_cast<size_t>(n), ShmDtype::kFloat32, false);
    through_slots[r] = plain;
    EXPECT_EQ(shm.in_place_ops(), 2u) << "rank " << r << ": the registered ops went through the slots";
    leftover_names[r] = ddp_shm_names().size();
  });
  at::Tensor expected = noise(n, 0);
  for (int r = 1; r < world; ++r) expected = expected + noise(n, r);
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(whole[r].defined() && ranged[r].defined()) << "rank " << r;
    EXPECT_TRUE(at::equal(whole[r], expected)) << "rank " << r;
    EXPECT_TRUE(at::equal(through_slots[r], whole[r])) << "rank " << r << ": the two paths differ";
    at::Tensor want = noise(n, r);
    want.narrow(0, offset, part).copy_(expected.narrow(0, offset, part));
    EXPECT_TRUE(at::equal(ranged[r], want)) << "rank " << r << ": only the range is reduced";
    EXPECT_EQ(leftover_names[r], 0u) << "registered segments are unlinked once all have mapped them";
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, RegisteredWorld, ::testing::Values(2, 3, 6),
                         [](const ::testing::TestParamInfo<int>& p) { return "world" + std::to_string(p.param); });

TEST(RegisteredBuffer, AverageInFloat64AndMixedWithUnregisteredRanks) {
  std::vector<at::Tensor> avg(2), mixed(2);
  on_ranks(2, [&](int r, SharedMemoryAllreduce& shm) {
    auto memory = shm.register_buffer(5000 * sizeof(double));
    ASSERT_NE(memory, nullptr);
    at::Tensor buf = at::from_blob(memory.get(), {5000}, at::kDouble);
    buf.fill_(2.0 * (r + 1));
    shm.all_reduce(buf.data_ptr(), 5000, ShmDtype::kFloat64, true);
    avg[r] = buf.clone();
    // Rank 0 passes its registered buffer, rank 1 ordinary memory: the
    // ranks see that they disagree and all go through the slots.
    at::Tensor plain = at::full({5000}, 10.0, at::kDouble);
    buf.fill_(1.0);
    at::Tensor& mine = r == 0 ? buf : plain;
    shm.all_reduce(mine.data_ptr(), 5000, ShmDtype::kFloat64, false);
    mixed[r] = mine.clone();
    EXPECT_EQ(shm.in_place_ops(), 1u) << "rank " << r << ": only the first op was in place";
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(at::equal(avg[r], at::full({5000}, 3.0, at::kDouble))) << "rank " << r;
    EXPECT_TRUE(at::equal(mixed[r], at::full({5000}, 11.0, at::kDouble))) << "rank " << r;
  }
}

TEST(RegisteredBuffer, SizesThatDisagreeGiveNoBufferOnAnyRankAndTheGroupGoesOn) {
  std::vector<int> got(2, -1);
  std::vector<at::Tensor> after(2);
  on_ranks(2, [&](int r, SharedMemoryAllreduce& shm) {
    got[r] = shm.register_buffer(r == 0 ? 4096 : 3 * 4096) != nullptr;
    at::Tensor t = at::full({100}, 1.0f + r);
    shm.all_reduce(t.data_ptr(), 100, ShmDtype::kFloat32, false);
    after[r] = t;
  });
  EXPECT_EQ(got, (std::vector<int>{0, 0}));
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(at::equal(after[r], at::full({100}, 3.0f))) << "rank " << r;
  EXPECT_TRUE(ddp_shm_names().empty());
}

TEST(RegisteredBuffer, OutlivesItsCommunicator) {
  std::vector<std::shared_ptr<void>> kept(2);
  on_ranks(2, [&](int r, SharedMemoryAllreduce& shm) { kept[r] = shm.register_buffer(8192); });
  // on_ranks has destroyed every communicator here
  for (int r = 0; r < 2; ++r) {
    ASSERT_NE(kept[r], nullptr);
    std::memset(kept[r].get(), 0x5a, 8192);  // still mapped
    EXPECT_EQ(static_cast<unsigned char*>(kept[r].get())[8191], 0x5a);
  }
}

// Through the backend: the buffers the reducer asks for are registered ones,
// and an all_reduce of them gives the same sums as of ordinary tensors.
TEST(RegisteredBuffer, TheGlooBackendHandsThemOutAndReducesThem) {
  auto store = make_in_memory_store();
  GlooOptions options;
  options.timeout = 20s;
  std::vector<at::Tensor> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto c = make_gloo_collective(store, r, 2, options);
      at::Tensor buf = c->new_reduction_buffer(300000, at::TensorOptions(at::kFloat));
      EXPECT_EQ(buf.sizes(), at::IntArrayRef({300000}));
      EXPECT_TRUE(at::equal(buf, at::zeros({300000}, at::kFloat)));
      buf.copy_(noise(300000, r));
      ASSERT_TRUE(c->all_reduce(buf, ReduceOp::kSum)->wait(10s));
      results[r] = buf.clone();
      at::Tensor half = c->new_reduction_buffer(10, at::TensorOptions(at::kHalf));  // not for shared memory
      EXPECT_EQ(half.scalar_type(), at::kHalf);
    });
  }
  for (auto& t : threads) t.join();
  const at::Tensor expected = noise(300000, 0) + noise(300000, 1);
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(at::equal(results[r], expected)) << "rank " << r;
}

TEST(SharedMemoryAllreduce, RanksOnDifferentHostsAllFallBack) {
  auto store = make_in_memory_store();
  auto rank0 = std::async(std::launch::async, [&] {
    std::string why;
    auto shm = SharedMemoryAllreduce::connect(*store, 0, 2, 5000ms, &why);
    return std::make_pair(shm == nullptr, why);
  });
  store->set("shm/host/1", "another-host|another-boot|mnt:[1]");  // rank 1, elsewhere
  const auto [fell_back, why] = rank0.get();
  EXPECT_TRUE(fell_back);
  EXPECT_NE(why.find("more than one host"), std::string::npos) << why;
  EXPECT_FALSE(store->get("shm/name").has_value()) << "no segment is created for a multi-host group";
}

TEST(SharedMemoryAllreduce, APeerThatCannotMapTheSegmentFallsBackAndSaysTheGroupWasOnOneHost) {
  auto store = make_in_memory_store();
  auto rank0 = std::async(std::launch::async, [&] {
    std::string why;
    bool on_one_host = false;
    auto shm = SharedMemoryAllreduce::connect(*store, 0, 2, 10000ms, &why, &on_one_host);
    return std::make_tuple(shm == nullptr, why, on_one_host);
  });
  // Rank 1, played here: on the same host, but its /dev/shm will not map the segment.
  store->set("shm/host/1", store->wait_get("shm/host/0", std::chrono::seconds(10)));
  EXPECT_FALSE(store->wait_get("shm/name", std::chrono::seconds(10)).empty());
  store->set("shm/mapped/1", "0");
  const auto [fell_back, why, on_one_host] = rank0.get();
  EXPECT_TRUE(fell_back);
  EXPECT_TRUE(on_one_host) << "the case the Gloo backend warns about";
  EXPECT_NE(why.find("could not map"), std::string::npos) << why;
}

TEST(SharedMemoryAllreduce, APeerThatLeftFailsTheWaiterAtOnce) {
  auto store = make_in_memory_store();
  std::promise<void> left;
  std::thread quitter([&] {
    auto shm = SharedMemoryAllreduce::connect(*store, 1, 2, 10000ms);
    ASSERT_NE(shm, nullptr);
    shm.reset();
    left.set_value();
  });
  auto shm = SharedMemoryAllreduce::connect(*store, 0, 2, 10000ms);
  ASSERT_NE(shm, nullptr);
  quitter.join();
  left.get_future().get();
  std::vector<float> data(100, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  try {
    shm->all_reduce(data.data(), data.size(), ShmDtype::kFloat32, false);
    ADD_FAILURE() << "all_reduce without its peer succeeded";
  } catch (const ShmBarrierError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 left the group"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
}

// Three ranks whose float sums depend on their order: the TCP path that
// gathers and sums in rank order gives the shared-memory path's bits, for
// sums and averages, so a job that fell back to TCP (/dev/shm full) ends
// bitwise equal to one that did not.
std::vector<at::Tensor> reduce_three_ranks(GlooOptions options, ReduceOp op) {
  auto store = make_in_memory_store();
  std::vector<at::Tensor> results(3);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.emplace_back([&, r] {
      auto c = make_gloo_collective(store, r, 3, options);
      at::Tensor t = at::empty({1000}, at::kFloat);
      auto* p = t.data_ptr<float>();
      for (int i = 0; i < 1000; ++i) {
        // Magnitudes far apart, so (a + b) + c and a + (b + c) differ.
        p[i] = r == 0 ? 1e8f + static_cast<float>(i) : r == 1 ? 0.37f * static_cast<float>(i + 1) : -1e8f + 0.11f;
      }
      ASSERT_TRUE(c->all_reduce(t, op)->wait(20s));
      results[static_cast<size_t>(r)] = t;
    });
  }
  for (auto& t : ranks) t.join();
  return results;
}

TEST(GlooRankOrderSum, TcpGatheredAndSummedInRankOrderEqualsTheSharedMemoryPathBitForBit) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
    GlooOptions shm;
    GlooOptions tcp;
    tcp.shared_memory = false;
    tcp.sum_in_rank_order = true;
    const auto a = reduce_three_ranks(shm, op);
    const auto b = reduce_three_ranks(tcp, op);
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(a[r].defined() && b[r].defined());
      EXPECT_EQ(std::memcmp(a[r].data_ptr(), b[r].data_ptr(), 1000 * sizeof(float)), 0) << "rank " << r;
      EXPECT_EQ(std::memcmp(a[0].data_ptr(), a[r].data_ptr(), 1000 * sizeof(float)), 0) << "rank " << r;
    }
  }
}

// A barrier in anonymous shared memory, rank 1 a child process that exits
// without arriving: rank 0 names it within a few liveness checks, long
// before its timeout.
TEST(ShmBarrier, ADeadPeerProcessIsNamedWithinMilliseconds) {
  void* mem = mmap(nullptr, sizeof(ShmBarrierState), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* state = new (mem) ShmBarrierState{};
  for (auto& pid : state->pids) pid.store(0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ShmBarrier joined(state, 1, 2);  // registers its pid, then dies
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ShmBarrier barrier(state, 0, 2);
  const auto start = std::chrono::steady_clock::now();
  try {
    barrier.arrive_and_wait(30000ms);
    ADD_FAILURE() << "barrier passed without rank 1";
  } catch (const ShmBarrierError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (pid " + std::to_string(child) + ") exited"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  munmap(mem, sizeof(ShmBarrierState));
}

// Rank 1 leaves the group (its error unwinding destroys its communicator)
// and exits 300 ms later: rank 0 fails only after rank 1's process ended, so
// the agent sees the root cause exit first and rank 0's failure after it.
TEST(ShmBarrier, APeerThatLeftIsWaitedForUntilItsProcessEnds) {
  void* mem = mmap(nullptr, sizeof(ShmBarrierState), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* state = new (mem) ShmBarrierState{};
  for (auto& pid : state->pids) pid.store(0);
  ShmBarrier barrier(state, 0, 2);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ShmBarrier joined(state, 1, 2);
    std::this_thread::sleep_for(100ms);
    joined.leave();
    std::this_thread::sleep_for(300ms);
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    barrier.arrive_and_wait(30000ms);
    ADD_FAILURE() << "barrier passed without rank 1";
  } catch (const ShmBarrierError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 left the group"), std::string::npos) << e.what();
  }
  const auto took = std::chrono::steady_clock::now() - start;
  // Ended as the agent sees it: a zombie. (Under ThreadSanitizer the child has
  // the sanitizer's thread too, and its main thread shows Z a moment before the
  // whole process can be reaped, so waitpid(WNOHANG) would be too early a test.)
  std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
  const std::string line((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = line.rfind(')');
  ASSERT_NE(close, std::string::npos) << line;
  EXPECT_EQ(line.substr(close + 2, 1), "Z") << "rank 0 failed before rank 1's process ended: " << line;
  int status = 0;
  EXPECT_EQ(waitpid(child, &status, 0), child);
  EXPECT_GE(took, 350ms);
  EXPECT_LT(took, ShmBarrier::kRootCauseExitWait);
  munmap(mem, sizeof(ShmBarrierState));
}

TEST(ShmBarrier, TimesOutWhenAPeerNeverArrives) {
  ShmBarrierState state;
  for (auto& pid : state.pids) pid.store(0);
  ShmBarrier barrier(&state, 0, 2);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(barrier.arrive_and_wait(200ms), ShmBarrierError);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 3s);
}

// Through the backend: a peer that destroyed its communicator makes the next
// all_reduce fail fast, naming it, on the shared-memory path too.
TEST(SharedMemoryAllreduce, TheGlooBackendReportsADepartedPeer) {
  auto store = make_in_memory_store();
  GlooOptions options;
  options.timeout = 20s;
  std::promise<void> gone;
  std::thread peer([&] {
    auto c = make_gloo_collective(store, 1, 2, options);
    at::Tensor t = at::ones({10}, at::kFloat);
    c->all_reduce(t, ReduceOp::kSum)->wait(10s);
    c.reset();
    gone.set_value();
  });
  auto c = make_gloo_collective(store, 0, 2, options);
  at::Tensor t = at::ones({10}, at::kFloat);
  ASSERT_TRUE(c->all_reduce(t, ReduceOp::kSum)->wait(10s));
  EXPECT_TRUE(at::equal(t, at::full({10}, 2.0f)));
  peer.join();
  gone.get_future().get();
  const auto start = std::chrono::steady_clock::now();
  try {
    c->all_reduce(t, ReduceOp::kSum)->wait(10s);
    ADD_FAILURE() << "all_reduce after the peer left succeeded";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce #2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 left the group"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

}  // namespace
}  // namespace ddp
