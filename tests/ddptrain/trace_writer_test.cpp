// Trace writer: the Chrome trace-event JSON it writes (metadata naming the
// rank's process and its compute/communication threads, one complete "X"
// event per span with microsecond ts/dur and step/bytes args), write errors,
// and trace_path_for_rank's per-rank file names.
#include "trace_writer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <iterator>
#include <set>
#include <stdexcept>
#include <string>

#include "test_util.h"

namespace ddp::train {
namespace {

using testing::TempDir;

SteadyTime at_us(int64_t micros) { return SteadyTime(std::chrono::microseconds(micros)); }

nlohmann::json read_json(const std::string& path) {
  return nlohmann::json::parse(testing::read_text(path));  // throws on invalid JSON
}

const nlohmann::json* find_event(const nlohmann::json& events, const std::string& ph, const std::string& name) {
  for (const auto& e : events) {
    if (e.at("ph") == ph && e.at("name") == name) return &e;
  }
  return nullptr;
}

TEST(TraceWriter, WritesChromeTraceEventsForEverySpanOnBothLanes) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  TraceWriter trace(3);
  EXPECT_EQ(trace.size(), 0u);
  // Step 0 and step 1: forward/backward on compute, one bucket's all-reduce on
  // communication overlapping the backward.
  trace.span("forward", TraceLane::kCompute, at_us(1'000'000), at_us(1'000'250), 0);
  trace.span("backward", TraceLane::kCompute, at_us(1'000'250), at_us(1'000'750), 0);
  trace.span("all_reduce bucket 0", TraceLane::kCommunication, at_us(1'000'500), at_us(1'000'900), 0, 4096);
  trace.span("forward", TraceLane::kCompute, at_us(2'000'000), at_us(2'000'200), 1);
  trace.span("all_reduce bucket 0", TraceLane::kCommunication, at_us(2'000'300), at_us(2'000'310), 1, 0);
  EXPECT_EQ(trace.size(), 5u);

  const std::string path = dir.file("trace.json");
  trace.write(path);
  const nlohmann::json doc = read_json(path);

  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  const nlohmann::json& events = doc.at("traceEvents");
  ASSERT_TRUE(events.is_array());

  // Metadata: the process is "rank 3", sorted by rank; tid 0 compute, tid 1 communication.
  const nlohmann::json* process = find_event(events, "M", "process_name");
  ASSERT_NE(process, nullptr);
  EXPECT_EQ(process->at("pid"), 3);
  EXPECT_EQ(process->at("args").at("name"), "rank 3");
  const nlohmann::json* sort = find_event(events, "M", "process_sort_index");
  ASSERT_NE(sort, nullptr);
  EXPECT_EQ(sort->at("args").at("sort_index"), 3);
  int thread_names = 0;
  for (const auto& e : events) {
    if (e.at("ph") != "M" || e.at("name") != "thread_name") continue;
    ++thread_names;
    EXPECT_EQ(e.at("pid"), 3);
    EXPECT_EQ(e.at("args").at("name"), e.at("tid") == 0 ? "compute" : "communication");
  }
  EXPECT_EQ(thread_names, 2);

  // One complete event per span, in the order given.
  struct Expected {
    std::string name;
    int tid;
    double ts;
    double dur;
    int64_t step;
    int64_t bytes;  // -1: no bytes arg
  };
  const Expected expected[] = {
      {"forward", 0, 1'000'000.0, 250.0, 0, -1},
      {"backward", 0, 1'000'250.0, 500.0, 0, -1},
      {"all_reduce bucket 0", 1, 1'000'500.0, 400.0, 0, 4096},
      {"forward", 0, 2'000'000.0, 200.0, 1, -1},
      {"all_reduce bucket 0", 1, 2'000'300.0, 10.0, 1, 0},
  };
  size_t i = 0;
  for (const auto& e : events) {
    ASSERT_TRUE(e.contains("ph"));
    if (e.at("ph") == "M") continue;
    ASSERT_LT(i, std::size(expected)) << e.dump();
    const Expected& want = expected[i++];
    SCOPED_TRACE(e.dump());
    EXPECT_EQ(e.at("ph"), "X");
    EXPECT_EQ(e.at("name"), want.name);
    EXPECT_EQ(e.at("pid"), 3);
    EXPECT_EQ(e.at("tid"), want.tid);
    ASSERT_TRUE(e.at("ts").is_number());
    ASSERT_TRUE(e.at("dur").is_number());
    EXPECT_EQ(e.at("ts").get<double>(), want.ts);
    EXPECT_EQ(e.at("dur").get<double>(), want.dur);
    EXPECT_EQ(e.at("args").at("step"), want.step);
    if (want.bytes >= 0) {
      EXPECT_EQ(e.at("args").at("bytes"), want.bytes);
    } else {
      EXPECT_FALSE(e.at("args").contains("bytes"));
    }
  }
  EXPECT_EQ(i, std::size(expected));
}

TEST(TraceWriter, TimesAreMicrosecondsWithSubMicrosecondFractions) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  TraceWriter trace(0);
  const SteadyTime start(std::chrono::nanoseconds(5'001'500));  // 5001.5 us
  const SteadyTime end(std::chrono::nanoseconds(5'004'250));    // 5004.25 us
  trace.span("optimizer", TraceLane::kCompute, start, end, 7);
  trace.write(dir.file("t.json"));
  const nlohmann::json events = read_json(dir.file("t.json")).at("traceEvents");
  const nlohmann::json* e = find_event(events, "X", "optimizer");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->at("ts").get<double>(), 5001.5);
  EXPECT_EQ(e->at("dur").get<double>(), 2.75);
  EXPECT_EQ(e->at("tid"), 0);
  EXPECT_EQ(e->at("args").at("step"), 7);
}

TEST(TraceWriter, ASpanEndingBeforeItStartsHasZeroDuration) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  TraceWriter trace(1);
  trace.span("checkpoint", TraceLane::kCompute, at_us(500), at_us(400), 2);
  trace.write(dir.file("t.json"));
  const nlohmann::json events = read_json(dir.file("t.json")).at("traceEvents");
  const nlohmann::json* e = find_event(events, "X", "checkpoint");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->at("ts").get<double>(), 500.0);
  EXPECT_EQ(e->at("dur").get<double>(), 0.0);
}

TEST(TraceWriter, AnEmptyTraceIsStillValidJsonWithItsMetadata) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  TraceWriter trace(0);
  trace.write(dir.file("empty.json"));
  const nlohmann::json events = read_json(dir.file("empty.json")).at("traceEvents");
  ASSERT_TRUE(events.is_array());
  EXPECT_EQ(events.size(), 4u);  // process name, sort index, two thread names
  for (const auto& e : events) EXPECT_EQ(e.at("ph"), "M");
}

TEST(TraceWriter, RewritingReplacesTheFile) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.file("t.json");
  TraceWriter big(0);
  for (int s = 0; s < 50; ++s) big.span("forward", TraceLane::kCompute, at_us(s * 10), at_us(s * 10 + 5), s);
  big.write(path);
  TraceWriter small(0);
  small.span("only", TraceLane::kCommunication, at_us(1), at_us(2), 0, 8);
  small.write(path);
  const nlohmann::json events = read_json(path).at("traceEvents");  // no leftovers of the longer file
  EXPECT_EQ(events.size(), 5u);
  EXPECT_NE(find_event(events, "X", "only"), nullptr);
  EXPECT_EQ(find_event(events, "X", "forward"), nullptr);
}

TEST(TraceWriter, WriteFailureThrowsNamingTheFile) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  TraceWriter trace(0);
  trace.span("forward", TraceLane::kCompute, at_us(0), at_us(1), 0);
  const std::string path = dir.file("no-such-dir/trace.json");
  try {
    trace.write(path);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TracePathForRank, RankZeroKeepsThePath) {
  EXPECT_EQ(trace_path_for_rank("out/trace.json", 0), "out/trace.json");
  EXPECT_EQ(trace_path_for_rank("trace", 0), "trace");
}

TEST(TracePathForRank, OtherRanksInsertRankBeforeTheExtension) {
  EXPECT_EQ(trace_path_for_rank("out/trace.json", 1), "out/trace.rank1.json");
  EXPECT_EQ(trace_path_for_rank("/tmp/run/trace.json", 12), "/tmp/run/trace.rank12.json");
  EXPECT_EQ(trace_path_for_rank("trace.json", 3), "trace.rank3.json");
  EXPECT_EQ(trace_path_for_rank("a.b.json", 2), "a.b.rank2.json");  // only the last extension
  EXPECT_EQ(trace_path_for_rank("t.trace", 2), "t.rank2.trace");
}

TEST(TracePathForRank, WithoutAnExtensionOtherRanksGetJson) {
  EXPECT_EQ(trace_path_for_rank("out/trace", 2), "out/trace.rank2.json");
  // A dot in a folder name or a leading dot is not an extension.
  EXPECT_EQ(trace_path_for_rank("run.v1/trace", 1), "run.v1/trace.rank1.json");
  EXPECT_EQ(trace_path_for_rank("out/.trace", 1), "out/.trace.rank1.json");
}

TEST(TracePathForRank, EveryRankGetsADistinctPath) {
  std::set<std::string> paths;
  for (int r = 0; r < 16; ++r) paths.insert(trace_path_for_rank("trace.json", r));
  EXPECT_EQ(paths.size(), 16u);
}

}  // namespace
}  // namespace ddp::train
