#include "ddp/common/kv_store.h"

#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace ddp {
namespace {

using namespace std::chrono_literals;

// Records every completion of a wait; the store itself must never call it.
struct WaitLog {
  std::vector<Status> statuses;
  WaitCallback callback() {
    return [this](const Status& s) { statuses.push_back(s); };
  }
};

void run_all(const FiredWaits& fired) {
  for (const auto& f : fired) f();
}

class KvStoreTest : public ::testing::Test {
 protected:
  SteadyTime at(Duration d) const { return start + d; }

  KvStore kv;
  FiredWaits fired;
  WaitLog log;
  const SteadyTime start{std::chrono::hours(1)};
};

TEST_F(KvStoreTest, GetOfMissingKeyIsEmpty) {
  EXPECT_FALSE(kv.get("absent").has_value());
  EXPECT_EQ(kv.size(), 0u);
}

TEST_F(KvStoreTest, SetThenGetReturnsTheValue) {
  kv.set("k", "v", fired);
  ASSERT_TRUE(kv.get("k").has_value());
  EXPECT_EQ(*kv.get("k"), "v");
  EXPECT_EQ(kv.size(), 1u);
  EXPECT_TRUE(fired.empty());
}

TEST_F(KvStoreTest, SetOverwritesAnExistingValue) {
  kv.set("k", "one", fired);
  kv.set("k", "two", fired);
  EXPECT_EQ(*kv.get("k"), "two");
  EXPECT_EQ(kv.size(), 1u);
}

TEST_F(KvStoreTest, ValuesMayHoldArbitraryBytes) {
  const std::string bytes("a\0b\xff", 4);
  kv.set("bin", bytes, fired);
  EXPECT_EQ(*kv.get("bin"), bytes);
}

TEST_F(KvStoreTest, AddCountsAnAbsentKeyAsZero) {
  int64_t result = -1;
  ASSERT_TRUE(kv.add("n", 5, result, fired).ok());
  EXPECT_EQ(result, 5);
  EXPECT_EQ(*kv.get("n"), "5");
}

TEST_F(KvStoreTest, AddAccumulatesIncludingNegativeDeltas) {
  int64_t result = 0;
  ASSERT_TRUE(kv.add("n", 3, result, fired).ok());
  ASSERT_TRUE(kv.add("n", 4, result, fired).ok());
  EXPECT_EQ(result, 7);
  ASSERT_TRUE(kv.add("n", -10, result, fired).ok());
  EXPECT_EQ(result, -3);
  EXPECT_EQ(*kv.get("n"), "-3");
}

TEST_F(KvStoreTest, AddToAStoredIntegerStartsFromIt) {
  kv.set("n", "40", fired);
  int64_t result = 0;
  ASSERT_TRUE(kv.add("n", 2, result, fired).ok());
  EXPECT_EQ(result, 42);
}

TEST_F(KvStoreTest, AddOnANonIntegerValueIsInvalidArgumentAndLeavesItUnchanged) {
  kv.set("n", "12abc", fired);
  int64_t result = 99;
  Status s = kv.add("n", 1, result, fired);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'n'"), std::string::npos) << s.message();
  EXPECT_EQ(*kv.get("n"), "12abc");

  kv.set("e", "", fired);
  EXPECT_EQ(kv.add("e", 1, result, fired).code(), StatusCode::kInvalidArgument);
}

// Found by coordinator_rpc_fuzz: the delta comes from any caller of KvAdd,
// and a sum past 64 bits was undefined behaviour (in practice it wrapped).
TEST_F(KvStoreTest, AddBeyond64BitsIsInvalidArgumentAndLeavesTheValueUnchanged) {
  const int64_t max = std::numeric_limits<int64_t>::max();
  int64_t result = 0;
  ASSERT_TRUE(kv.add("n", max, result, fired).ok());
  result = 7;
  const Status up = kv.add("n", 1, result, fired);
  EXPECT_EQ(up.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(up.message().find("overflows"), std::string::npos) << up.message();
  EXPECT_EQ(result, 7) << "nothing returned";
  EXPECT_EQ(kv.get("n"), std::to_string(max));
  kv.set("m", std::to_string(std::numeric_limits<int64_t>::min()), fired);
  EXPECT_EQ(kv.add("m", -1, result, fired).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(kv.add("m", max, result, fired).ok());
  EXPECT_EQ(result, -1);
}

TEST_F(KvStoreTest, CompareSetSwapsWhenTheValueIsTheExpectedOne) {
  kv.set("k", "old", fired);
  std::string current;
  EXPECT_TRUE(kv.compare_set("k", std::string("old"), "new", current, fired));
  EXPECT_EQ(current, "new");
  EXPECT_EQ(*kv.get("k"), "new");
}

TEST_F(KvStoreTest, CompareSetRefusesOnAMismatchAndReportsTheCurrentValue) {
  kv.set("k", "actual", fired);
  std::string current;
  EXPECT_FALSE(kv.compare_set("k", std::string("expected"), "new", current, fired));
  EXPECT_EQ(current, "actual");
  EXPECT_EQ(*kv.get("k"), "actual");
}

TEST_F(KvStoreTest, CompareSetWithAnExpectedValueRefusesWhenTheKeyIsAbsent) {
  std::string current = "junk";
  EXPECT_FALSE(kv.compare_set("k", std::string("x"), "new", current, fired));
  EXPECT_EQ(current, "");
  EXPECT_FALSE(kv.get("k").has_value());
}

TEST_F(KvStoreTest, CompareSetExpectingAbsenceCreatesOnlyAMissingKey) {
  std::string current;
  EXPECT_TRUE(kv.compare_set("k", std::nullopt, "first", current, fired));
  EXPECT_EQ(current, "first");
  EXPECT_FALSE(kv.compare_set("k", std::nullopt, "second", current, fired));
  EXPECT_EQ(current, "first");
  EXPECT_EQ(*kv.get("k"), "first");
}

TEST_F(KvStoreTest, DeletePrefixRemovesOnlyKeysStartingWithIt) {
  for (const char* k : {"a/1", "a/2", "a/", "ab", "b/1", "A/1"}) kv.set(k, "v", fired);
  EXPECT_EQ(kv.delete_prefix("a/"), 3);
  EXPECT_FALSE(kv.get("a/1").has_value());
  EXPECT_FALSE(kv.get("a/2").has_value());
  EXPECT_FALSE(kv.get("a/").has_value());
  EXPECT_TRUE(kv.get("ab").has_value());
  EXPECT_TRUE(kv.get("b/1").has_value());
  EXPECT_TRUE(kv.get("A/1").has_value());
  EXPECT_EQ(kv.size(), 3u);
}

TEST_F(KvStoreTest, DeletePrefixWithNoMatchRemovesNothing) {
  kv.set("x", "v", fired);
  EXPECT_EQ(kv.delete_prefix("y"), 0);
  EXPECT_EQ(kv.size(), 1u);
}

TEST_F(KvStoreTest, DeleteOfTheEmptyPrefixRemovesEverything) {
  kv.set("x", "v", fired);
  kv.set("y", "v", fired);
  EXPECT_EQ(kv.delete_prefix(""), 2);
  EXPECT_EQ(kv.size(), 0u);
}

TEST_F(KvStoreTest, WaitOnPresentKeysCompletesAtOnceButIsRunByTheCaller) {
  kv.set("a", "1", fired);
  kv.wait({"a"}, at(10s), log.callback(), fired);
  EXPECT_TRUE(log.statuses.empty()) << "the store must not run callbacks itself";
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].status.ok());
  EXPECT_EQ(kv.parked_waits(), 0u);
  run_all(fired);
  ASSERT_EQ(log.statuses.size(), 1u);
  EXPECT_TRUE(log.statuses[0].ok());
}

TEST_F(KvStoreTest, WaitOnNoKeysCompletesAtOnce) {
  kv.wait({}, at(10s), log.callback(), fired);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].status.ok());
}

TEST_F(KvStoreTest, WaitIsParkedUntilEveryKeyIsPresent) {
  kv.wait({"a", "b"}, at(10s), log.callback(), fired);
  EXPECT_TRUE(fired.empty());
  EXPECT_EQ(kv.parked_waits(), 1u);

  kv.set("a", "1", fired);
  EXPECT_TRUE(fired.empty());
  EXPECT_EQ(kv.parked_waits(), 1u);

  kv.set("b", "2", fired);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].status.ok());
  EXPECT_EQ(kv.parked_waits(), 0u);
  EXPECT_TRUE(log.statuses.empty());
  run_all(fired);
  ASSERT_EQ(log.statuses.size(), 1u);
  EXPECT_TRUE(log.statuses[0].ok());
}

TEST_F(KvStoreTest, OneSetReleasesEveryWaitItCompletesAndNoOther) {
  WaitLog first, second, other;
  kv.wait({"k"}, at(10s), first.callback(), fired);
  kv.wait({"k"}, at(10s), second.callback(), fired);
  kv.wait({"k", "z"}, at(10s), other.callback(), fired);
  kv.set("k", "v", fired);
  EXPECT_EQ(fired.size(), 2u);
  EXPECT_EQ(kv.parked_waits(), 1u);
  run_all(fired);
  EXPECT_EQ(first.statuses.size(), 1u);
  EXPECT_EQ(second.statuses.size(), 1u);
  EXPECT_TRUE(other.statuses.empty());
}

TEST_F(KvStoreTest, AddReleasesAWaitOnItsKey) {
  kv.wait({"counter"}, at(10s), log.callback(), fired);
  int64_t result = 0;
  ASSERT_TRUE(kv.add("counter", 1, result, fired).ok());
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].status.ok());
}

TEST_F(KvStoreTest, SuccessfulCompareSetReleasesAWaitAndAFailedOneDoesNot) {
  kv.wait({"k"}, at(10s), log.callback(), fired);
  std::string current;
  EXPECT_FALSE(kv.compare_set("k", std::string("x"), "v", current, fired));
  EXPECT_TRUE(fired.empty());
  EXPECT_TRUE(kv.compare_set("k", std::nullopt, "v", current, fired));
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].status.ok());
}

TEST_F(KvStoreTest, ExpireEndsWaitsPastTheirDeadlineNamingTheMissingKeys) {
  kv.set("have", "1", fired);
  kv.wait({"have", "missing"}, at(5s), log.callback(), fired);
  kv.expire(at(5s), fired);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(fired[0].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(fired[0].status.message().find("missing"), std::string::npos) << fired[0].status.message();
  EXPECT_EQ(fired[0].status.message().find("have"), std::string::npos) << fired[0].status.message();
  EXPECT_EQ(kv.parked_waits(), 0u);
  EXPECT_TRUE(log.statuses.empty());
  run_all(fired);
  ASSERT_EQ(log.statuses.size(), 1u);
  EXPECT_EQ(log.statuses[0].code(), StatusCode::kDeadlineExceeded);
}

TEST_F(KvStoreTest, ExpireKeepsWaitsWhoseDeadlineIsStillAhead) {
  WaitLog early, late;
  kv.wait({"k"}, at(5s), early.callback(), fired);
  kv.wait({"k"}, at(20s), late.callback(), fired);
  kv.expire(at(4s), fired);
  EXPECT_TRUE(fired.empty());
  kv.expire(at(10s), fired);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_EQ(kv.parked_waits(), 1u);
  run_all(fired);
  EXPECT_EQ(early.statuses.size(), 1u);
  EXPECT_TRUE(late.statuses.empty());

  fired.clear();
  kv.set("k", "v", fired);
  ASSERT_EQ(fired.size(), 1u);
  EXPECT_TRUE(fired[0].status.ok());
  run_all(fired);
  EXPECT_EQ(late.statuses.size(), 1u);
}

TEST_F(KvStoreTest, AnExpiredWaitIsNotReleasedAgainByALaterSet) {
  kv.wait({"k"}, at(1s), log.callback(), fired);
  kv.expire(at(2s), fired);
  ASSERT_EQ(fired.size(), 1u);
  fired.clear();
  kv.set("k", "v", fired);
  EXPECT_TRUE(fired.empty());
}

TEST_F(KvStoreTest, AbortWaitsEndsEveryParkedWaitWithTheGivenStatus) {
  WaitLog a, b;
  kv.wait({"x"}, at(10s), a.callback(), fired);
  kv.wait({"y", "z"}, at(20s), b.callback(), fired);
  const Status over{StatusCode::kAborted, "generation 0 has ended"};
  kv.abort_waits(over, fired);
  ASSERT_EQ(fired.size(), 2u);
  EXPECT_EQ(kv.parked_waits(), 0u);
  for (const auto& f : fired) {
    EXPECT_EQ(f.status.code(), StatusCode::kAborted);
    EXPECT_EQ(f.status.message(), "generation 0 has ended");
  }
  run_all(fired);
  EXPECT_EQ(a.statuses.size(), 1u);
  EXPECT_EQ(b.statuses.size(), 1u);
}

TEST_F(KvStoreTest, AbortWaitsLeavesTheDataAlone) {
  kv.set("x", "1", fired);
  kv.abort_waits({StatusCode::kAborted, "over"}, fired);
  EXPECT_TRUE(fired.empty());
  EXPECT_EQ(*kv.get("x"), "1");
}

}  // namespace
}  // namespace ddp
