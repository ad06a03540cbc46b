// The pieces CoordinatorJob keeps per job: one generation's store (KV,
// barriers, NCCL IDs) and the registry of parked watches.
#include "coordinator/generation_store.h"
#include "coordinator/watch_registry.h"

#include <gtest/gtest.h>

#include <memory>

namespace ddp {
namespace {

using namespace std::chrono_literals;

struct Waited {
  int calls = 0;
  Status status;
};

WaitCallback record(const std::shared_ptr<Waited>& w) {
  return [w](const Status& s) {
    ++w->calls;
    w->status = s;
  };
}

void run(FiredWaits& fired) {
  FiredWaits now;
  now.swap(fired);
  for (const FiredWait& f : now) f();
}

TEST(GenerationStore, ABarrierReleasesEveryoneWhenTheLastArrives) {
  auto ids = make_random_id_source();
  GenerationStore store(*ids);
  FiredWaits fired;
  const SteadyTime deadline{std::chrono::hours(2)};
  auto a = std::make_shared<Waited>(), b = std::make_shared<Waited>(), c = std::make_shared<Waited>();
  store.barrier("init", 3, deadline, record(a), fired);
  store.barrier("init", 3, deadline, record(b), fired);
  run(fired);
  EXPECT_EQ(a->calls + b->calls, 0);
  store.barrier("init", 3, deadline, record(c), fired);
  run(fired);
  for (const auto& w : {a, b, c}) {
    EXPECT_EQ(w->calls, 1);
    EXPECT_TRUE(w->status.ok());
  }
}

TEST(GenerationStore, OneNcclIdPerKeyUntilCleared) {
  auto ids = make_random_id_source();
  GenerationStore store(*ids);
  const std::string first = store.nccl_id("world");
  EXPECT_EQ(store.nccl_id("world"), first);
  EXPECT_NE(store.nccl_id("pipeline"), first);
  FiredWaits fired;
  auto waiting = std::make_shared<Waited>();
  store.kv().wait({"never"}, SteadyTime{std::chrono::hours(2)}, record(waiting), fired);
  store.kv().set("k", "v", fired);
  store.clear({StatusCode::kAborted, "generation 0 has ended"}, fired);
  run(fired);
  EXPECT_EQ(waiting->calls, 1);
  EXPECT_EQ(waiting->status.code(), StatusCode::kAborted);
  EXPECT_FALSE(store.kv().get("k").has_value());
  EXPECT_NE(store.nccl_id("world"), first);  // a new generation, new IDs
}

TEST(WatchRegistry, TakesWhatIsAnswerableInParkingOrderAndKeepsTheRest) {
  WatchRegistry registry;
  const SteadyTime t{std::chrono::hours(1)};
  for (int node = 0; node < 4; ++node) registry.park({node, node % 2, GenerationState::kRunning, false, t + node * 1s, {}});
  const auto gen1 = registry.take_if([](const ParkedWatch& w) { return w.generation == 1; });
  ASSERT_EQ(gen1.size(), 2u);
  EXPECT_EQ(gen1[0].node_rank, 1);
  EXPECT_EQ(gen1[1].node_rank, 3);
  const auto expired = registry.take_expired(t);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].node_rank, 0);
  EXPECT_EQ(registry.take_all().size(), 1u);
  EXPECT_EQ(registry.size(), 0u);
}

}  // namespace
}  // namespace ddp
