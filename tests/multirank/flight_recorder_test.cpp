// FlightRecorder: numbering, state changes, the bounded ring and its tail.
#include "ddp/runtime/flight_recorder.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace ddp {
namespace {

const SteadyTime kT0{std::chrono::seconds(100)};

TEST(FlightRecorder, NumbersFromOneInIssueOrder) {
  FlightRecorder rec(8);
  EXPECT_EQ(rec.last_enqueued(), 0u);
  EXPECT_TRUE(rec.tail(10).empty());
  EXPECT_EQ(rec.enqueue("all_reduce", 400, "float32", 3, kT0), 1u);
  EXPECT_EQ(rec.enqueue("broadcast", 8, "int64", -1, kT0), 2u);
  EXPECT_EQ(rec.enqueue("barrier", 0, "", -1, kT0), 3u);
  EXPECT_EQ(rec.last_enqueued(), 3u);
  const auto tail = rec.tail(10);
  ASSERT_EQ(tail.size(), 3u);
  EXPECT_EQ(tail[0].sequence, 1u);
  EXPECT_EQ(tail[0].op, "all_reduce");
  EXPECT_EQ(tail[0].bytes, 400);
  EXPECT_EQ(tail[0].dtype, "float32");
  EXPECT_EQ(tail[0].bucket, 3);
  EXPECT_EQ(tail[0].state, CollectiveState::kEnqueued);
  EXPECT_EQ(tail[0].enqueued, kT0);
  EXPECT_EQ(tail[1].op, "broadcast");
  EXPECT_EQ(tail[2].op, "barrier");
  const auto last_two = rec.tail(2);
  ASSERT_EQ(last_two.size(), 2u);
  EXPECT_EQ(last_two[0].sequence, 2u);
  EXPECT_EQ(last_two[1].sequence, 3u);
}

TEST(FlightRecorder, StatesAndTimes) {
  FlightRecorder rec(8);
  const uint64_t a = rec.enqueue("all_reduce", 4, "float32", -1, kT0);
  const uint64_t b = rec.enqueue("all_reduce", 4, "float32", -1, kT0);
  rec.mark_started(a, kT0 + std::chrono::seconds(1));
  EXPECT_EQ(rec.tail(2)[0].state, CollectiveState::kStarted);
  EXPECT_EQ(rec.tail(2)[0].started, kT0 + std::chrono::seconds(1));
  EXPECT_EQ(rec.last_completed(), 0u);
  rec.mark_ended(a, true, kT0 + std::chrono::seconds(2));
  EXPECT_EQ(rec.last_completed(), a);
  rec.mark_started(b, kT0 + std::chrono::seconds(3));
  rec.mark_ended(b, false, kT0 + std::chrono::seconds(4));
  EXPECT_EQ(rec.last_completed(), a) << "a failure is not a completion";
  const auto tail = rec.tail(2);
  EXPECT_EQ(tail[0].state, CollectiveState::kCompleted);
  EXPECT_EQ(tail[0].ended, kT0 + std::chrono::seconds(2));
  EXPECT_EQ(tail[1].state, CollectiveState::kFailed);
  EXPECT_STREQ(to_string(CollectiveState::kEnqueued), "enqueued");
  EXPECT_STREQ(to_string(CollectiveState::kStarted), "started");
  EXPECT_STREQ(to_string(CollectiveState::kCompleted), "completed");
  EXPECT_STREQ(to_string(CollectiveState::kFailed), "failed");
}

TEST(FlightRecorder, RingKeepsTheNewest) {
  FlightRecorder rec(4);
  for (int i = 0; i < 10; ++i) rec.enqueue("all_reduce", i, "float32", i, kT0);
  const auto tail = rec.tail(100);
  ASSERT_EQ(tail.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(tail[i].sequence, 7u + i);
  // Marking an overwritten entry is harmless and does not disturb its slot's new owner.
  rec.mark_started(3, kT0);
  rec.mark_ended(3, true, kT0);
  for (const auto& r : rec.tail(4)) EXPECT_EQ(r.state, CollectiveState::kEnqueued);
  EXPECT_EQ(rec.last_enqueued(), 10u);
}

TEST(FlightRecorder, ConcurrentWritersAndReader) {
  FlightRecorder rec(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) {
        const uint64_t s = rec.enqueue("all_reduce", 4, "float32", -1, kT0);
        rec.mark_started(s, kT0);
        rec.mark_ended(s, true, kT0);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 500; ++i) {
      const auto tail = rec.tail(16);
      for (size_t k = 1; k < tail.size(); ++k) EXPECT_EQ(tail[k].sequence, tail[k - 1].sequence + 1);
    }
  });
  for (auto& th : threads) th.join();
  EXPECT_EQ(rec.last_enqueued(), 2000u);
  EXPECT_EQ(rec.last_completed(), 2000u);
}

}  // namespace
}  // namespace ddp
