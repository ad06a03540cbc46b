// Stack merge: ranks grouped by identical main-thread stack, library frames
// folded, the odd group out named as the likely culprit.

#include "stacks/stack_merge.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "stacks/rank_stacks.h"

namespace ddp {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kTrain = "/home/u/proj/train.py";
constexpr const char* kData = "/home/u/proj/data.py";
constexpr const char* kTorch = "/opt/venv/lib/python3.10/site-packages/torch/";
constexpr const char* kTrainer = "/home/u/bin/ddptrain";
constexpr const char* kLibc = "/lib/x86_64-linux-gnu/libc.so.6";
constexpr const char* kLibgloo = "/usr/lib/x86_64-linux-gnu/libgloo.so";
constexpr const char* kStopped = "stopped by a signal (state T): it cannot answer";

StackFrame py(std::string file, int line, std::string function, std::string code = "") {
  return StackFrame{std::move(function), std::move(file), line, std::move(code)};
}

StackFrame torch_frame(const std::string& file, int line, std::string function) {
  return py(kTorch + file, line, std::move(function));
}

StackFrame native(std::string function, std::string file) {
  return StackFrame{std::move(function), std::move(file), 0, ""};
}

/// A rank whose main thread has `frames`; a helper thread comes first so
/// that the merge must pick the main thread, not the first one.
RankStacks rank_with(int rank, std::vector<StackFrame> frames, std::string language = "python") {
  RankStacks r;
  r.rank = rank;
  r.language = std::move(language);
  ThreadStack helper;
  helper.name = "Thread-1";
  helper.frames = {py("/usr/lib/python3.10/threading.py", 324, "wait")};
  r.threads.push_back(helper);
  ThreadStack main;
  main.name = "MainThread";
  main.main = true;
  main.frames = std::move(frames);
  r.threads.push_back(std::move(main));
  return r;
}

RankStacks stopped_rank(int rank) {
  RankStacks r;
  r.rank = rank;
  r.language = "process";
  r.note = kStopped;
  return r;
}

std::vector<StackFrame> in_all_reduce() {
  return {py(kTrain, 41, "<module>", "loss.backward()"), torch_frame("_tensor.py", 522, "backward"),
          torch_frame("autograd/__init__.py", 197, "backward")};
}

std::vector<StackFrame> loading_data() {
  return {py(kTrain, 35, "<module>", "batch = next(loader)"), py(kData, 12, "load", "  time.sleep(100)\n")};
}

std::vector<StackFrame> in_collective(int line) {
  return {py(kTrain, line, "train_step", "dist.all_reduce(t)"),
          torch_frame("distributed/distributed_c10d.py", 1536, "all_reduce")};
}

/// 8 user frames model.py:1..8 with a library frame between each two, then
/// a library frame where the rank waits.
std::vector<StackFrame> deep_user_stack() {
  std::vector<StackFrame> frames;
  for (int i = 1; i <= 8; ++i) {
    frames.push_back(py("/home/u/proj/model.py", i, "f" + std::to_string(i)));
    frames.push_back(torch_frame("nn/modules/module.py", 1500 + i, "_call_impl"));
  }
  frames.push_back(torch_frame("distributed/distributed_c10d.py", 1536, "all_reduce"));
  return frames;
}

TEST(StackMergeClassify, FrameKinds) {
  EXPECT_EQ(classify_frame(py(kTrain, 41, "<module>")), FrameKind::kUser);
  EXPECT_EQ(classify_frame(py("/home/u/proj/python3_tools.py", 3, "f")), FrameKind::kUser);
  EXPECT_EQ(classify_frame(py("<string>", 1, "<module>")), FrameKind::kUser);
  EXPECT_EQ(classify_frame(torch_frame("_tensor.py", 522, "backward")), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(py("/usr/lib/python3/dist-packages/numpy/core.py", 1, "f")), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(py("/usr/lib/python3.10/threading.py", 324, "wait")), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(py("<frozen importlib._bootstrap>", 1, "_load")), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(py("/src/pytorch/torch/nn/modules/module.py", 1, "_call_impl")), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(py("/opt/ddplaunch/python/_ddplaunch_companion/heartbeat.py", 9, "beat")),
            FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(StackFrame{}), FrameKind::kUnknown);
  EXPECT_EQ(classify_frame(native("??", "")), FrameKind::kUnknown);

  EXPECT_EQ(classify_frame(native("main", kTrainer)), FrameKind::kUser);
  EXPECT_EQ(classify_frame(native("ddp::train::Trainer::run()", kTrainer)), FrameKind::kUser);
  EXPECT_EQ(classify_frame(native("_ZN5mylib3runEv", kTrainer)), FrameKind::kUser);
  EXPECT_EQ(classify_frame(native("ddp::Reducer::wait()", kTrainer)), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(native("void gloo::allreduce<float>(gloo::AllreduceOptions&)", kTrainer)),
            FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(native("std::condition_variable::wait(std::unique_lock<std::mutex>&)", "")),
            FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(native("_start", kTrainer)), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(native("_PyEval_EvalFrameDefault", "/usr/bin/python3.10")), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(native("", "/opt/conda/lib/libtorch_cuda.so")), FrameKind::kLibrary);
  EXPECT_EQ(classify_frame(native("ncclGroupEnd", "/opt/nccl/libnccl.so.2")), FrameKind::kLibrary);
  EXPECT_STREQ(to_string(FrameKind::kLibrary), "library");
}

TEST(StackMergeFormat, FrameDisplay) {
  EXPECT_EQ(format_frame(py(kTrain, 41, "train_step", "loss.backward()")),
            "train.py:41 train_step (loss.backward())");
  EXPECT_EQ(format_frame(native("ddp::GlooCollective::all_reduce(std::vector<at::Tensor>&) const", kTrainer)),
            "ddptrain ddp::GlooCollective::all_reduce(...) const");
  EXPECT_EQ(format_frame(native("ddp::(anonymous namespace)::worker_loop()", "")),
            "ddp::(anonymous namespace)::worker_loop()");
  EXPECT_EQ(format_frame(StackFrame{}), "??");
}

TEST(StackMerge, ThreeRanksOneLoadingDataIsTheLikelyCulprit) {
  const MergedStacks merged =
      merge_stacks({rank_with(0, in_all_reduce()), rank_with(1, in_all_reduce()), rank_with(2, loading_data())}, 3);

  ASSERT_EQ(merged.groups.size(), 2u);
  EXPECT_THAT(merged.groups[0].ranks, ElementsAre(0, 1));
  EXPECT_EQ(merged.groups[0].count, 2);
  EXPECT_FALSE(merged.groups[0].likely_culprit);
  EXPECT_THAT(merged.groups[0].frames,
              ElementsAre("train.py:41 <module> (loss.backward())", "...", "__init__.py:197 backward"));
  EXPECT_EQ(merged.groups[0].innermost, "__init__.py:197 backward");
  EXPECT_EQ(merged.groups[0].key_frames.size(), 3u);
  EXPECT_THAT(merged.groups[1].ranks, ElementsAre(2));
  EXPECT_TRUE(merged.groups[1].likely_culprit);
  EXPECT_TRUE(merged.ranks_missing.empty());
  EXPECT_EQ(merged.asked, 3);

  EXPECT_EQ(format_merged_stacks(merged, 3),
            "  ranks 0,1 (2 of 3): train.py:41 <module> (loss.backward()) -> ... -> __init__.py:197 backward\n"
            "  rank 2 (1 of 3): train.py:35 <module> (batch = next(loader)) -> data.py:12 load (time.sleep(100))"
            "   <- likely culprit\n");
}

TEST(StackMerge, JsonCarriesGroupsFramesAndMissingRanks) {
  const MergedStacks merged = merge_stacks({rank_with(0, in_all_reduce()), rank_with(2, loading_data())}, 4);
  const nlohmann::json j = merged_stacks_to_json(merged);

  ASSERT_EQ(j.at("groups").size(), 2u);
  const nlohmann::json& first = j.at("groups").at(0);
  EXPECT_EQ(first.at("ranks"), nlohmann::json::array({0}));
  EXPECT_EQ(first.at("count"), 1);
  EXPECT_EQ(first.at("stack").size(), 3u);
  EXPECT_EQ(first.at("innermost"), "__init__.py:197 backward");
  EXPECT_EQ(first.at("likely_culprit"), false);  // 1 and 1: none smaller
  EXPECT_EQ(first.at("frames").at(0).at("file"), kTrain);
  EXPECT_EQ(first.at("frames").at(0).at("line"), 41);
  EXPECT_EQ(first.at("frames").at(0).at("code"), "loss.backward()");
  EXPECT_EQ(first.at("frames").at(0).at("kind"), "user");
  EXPECT_EQ(first.at("frames").at(1).at("kind"), "library");
  EXPECT_EQ(j.at("did_not_answer"), nlohmann::json::array({1, 3}));
}

TEST(StackMerge, IdenticalStacksFormOneGroupWithoutCulprit) {
  const MergedStacks merged =
      merge_stacks({rank_with(0, in_collective(7)), rank_with(1, in_collective(7)), rank_with(2, in_collective(7))}, 3);

  ASSERT_EQ(merged.groups.size(), 1u);
  EXPECT_THAT(merged.groups[0].ranks, ElementsAre(0, 1, 2));
  EXPECT_FALSE(merged.groups[0].likely_culprit);
  EXPECT_EQ(format_merged_stacks(merged, 3),
            "  ranks 0-2 (3 of 3): train.py:7 train_step (dist.all_reduce(t)) -> "
            "distributed_c10d.py:1536 all_reduce\n");

  // Nor with a hint (a desync whose collective completed): the one stack names no one.
  const MergedStacks hinted =
      merge_stacks({rank_with(0, in_collective(7)), rank_with(1, in_collective(7)), rank_with(2, in_collective(7))}, 3, {1});
  ASSERT_EQ(hinted.groups.size(), 1u);
  EXPECT_FALSE(hinted.groups[0].likely_culprit);
}

TEST(StackMerge, TwoRanksDifferingNameNoCulprit) {
  // Same function, another line: a different stack.
  const MergedStacks merged = merge_stacks({rank_with(1, in_collective(8)), rank_with(0, in_collective(7))}, 2);

  ASSERT_EQ(merged.groups.size(), 2u);
  EXPECT_THAT(merged.groups[0].ranks, ElementsAre(0));
  EXPECT_THAT(merged.groups[1].ranks, ElementsAre(1));
  EXPECT_FALSE(merged.groups[0].likely_culprit);
  EXPECT_FALSE(merged.groups[1].likely_culprit);
  const std::string text = format_merged_stacks(merged, 2);
  EXPECT_THAT(text, Not(HasSubstr("likely culprit")));
  EXPECT_THAT(text, HasSubstr("  the 2 groups differ, none smaller than every other: no group stands out\n"));
}

TEST(StackMerge, TwoEqualSmallestGroupsNameNoCulprit) {
  const MergedStacks merged = merge_stacks({rank_with(0, in_collective(7)), rank_with(1, in_collective(7)),
                                            rank_with(2, in_collective(8)), rank_with(3, loading_data())},
                                           4);
  ASSERT_EQ(merged.groups.size(), 3u);
  for (const StackGroup& g : merged.groups) EXPECT_FALSE(g.likely_culprit);
}

TEST(StackMerge, StoppedRanksAreGroupedByTheirNote) {
  const MergedStacks merged = merge_stacks({rank_with(0, in_collective(7)), rank_with(1, in_collective(7)),
                                            rank_with(2, in_collective(7)), stopped_rank(3)},
                                           4);

  ASSERT_EQ(merged.groups.size(), 2u);
  EXPECT_THAT(merged.groups[1].ranks, ElementsAre(3));
  EXPECT_EQ(merged.groups[1].note, kStopped);
  EXPECT_TRUE(merged.groups[1].frames.empty());
  EXPECT_TRUE(merged.groups[1].likely_culprit);
  EXPECT_THAT(format_merged_stacks(merged, 4),
              HasSubstr("  rank 3 (1 of 4): stopped by a signal (state T): it cannot answer   <- likely culprit\n"));

  const MergedStacks two_stopped =
      merge_stacks({stopped_rank(5), rank_with(0, in_collective(7)), stopped_rank(2)}, 6);
  ASSERT_EQ(two_stopped.groups.size(), 2u);
  EXPECT_THAT(two_stopped.groups[0].ranks, ElementsAre(2, 5));
  EXPECT_EQ(two_stopped.groups[0].note, kStopped);
  EXPECT_EQ(merged_stacks_to_json(two_stopped).at("groups").at(0).at("note"), kStopped);
}

TEST(StackMerge, RanksThatDidNotAnswerAreListed) {
  std::vector<RankStacks> answers = {rank_with(0, in_collective(7)), rank_with(1, in_collective(7))};
  answers.push_back(rank_with(1, loading_data()));  // a late duplicate: ignored
  const MergedStacks merged = merge_stacks(answers, 4);

  ASSERT_EQ(merged.groups.size(), 1u);
  EXPECT_THAT(merged.groups[0].ranks, ElementsAre(0, 1));
  EXPECT_THAT(merged.ranks_missing, ElementsAre(2, 3));
  EXPECT_THAT(format_merged_stacks(merged, 4), HasSubstr("\n  ranks 2,3 (2 of 4): did not answer\n"));
}

TEST(StackMerge, CppLibraryAndRuntimeFramesFold) {
  const std::vector<StackFrame> frames = {
      native("_start", kTrainer),
      native("__libc_start_main", kLibc),
      native("main", kTrainer),
      native("ddp::train::Trainer::run(ddp::train::Options const&)", kTrainer),
      native("ddp::DistributedDataParallel::finish_gradient_synchronization()", kTrainer),
      native("ddp::GlooCollective::all_reduce(std::vector<at::Tensor, std::allocator<at::Tensor> >&)", kTrainer),
      native("gloo::AllreduceRing<float>::run()", kLibgloo),
      native("gloo::transport::tcp::UnboundBuffer::waitRecv(int*, std::chrono::milliseconds)", kLibgloo),
      native("pthread_cond_wait", kLibc),
  };
  const MergedStacks merged = merge_stacks({rank_with(0, frames, "c++"), rank_with(1, frames, "c++")}, 2);

  ASSERT_EQ(merged.groups.size(), 1u);
  EXPECT_THAT(merged.groups[0].frames, ElementsAre("...", "ddptrain main", "ddptrain ddp::train::Trainer::run(...)",
                                                   "...", "libc.so.6 pthread_cond_wait"));
  EXPECT_EQ(merged.groups[0].innermost, "libc.so.6 pthread_cond_wait");
  EXPECT_EQ(merged.groups[0].key_frames.size(), frames.size());
}

TEST(StackMerge, CulpritHintMarksTheGroupsHoldingTheHintedRanks) {
  const std::vector<RankStacks> even = {rank_with(0, in_collective(7)), rank_with(1, in_collective(7)),
                                        rank_with(2, loading_data()), rank_with(3, loading_data())};
  const MergedStacks hinted = merge_stacks(even, 4, {3});
  ASSERT_EQ(hinted.groups.size(), 2u);
  EXPECT_FALSE(hinted.groups[0].likely_culprit);
  EXPECT_TRUE(hinted.groups[1].likely_culprit);
  EXPECT_THAT(format_merged_stacks(hinted, 4), HasSubstr("  ranks 2,3 (2 of 4): "));
  EXPECT_THAT(format_merged_stacks(hinted, 4), Not(HasSubstr("differ")));

  // The hint wins over the size rule.
  const std::vector<RankStacks> uneven = {rank_with(0, in_collective(7)), rank_with(1, in_collective(7)),
                                          rank_with(2, in_collective(7)), rank_with(3, loading_data())};
  const MergedStacks against_size = merge_stacks(uneven, 4, {0});
  EXPECT_TRUE(against_size.groups[0].likely_culprit);
  EXPECT_FALSE(against_size.groups[1].likely_culprit);

  // A hinted rank that did not answer leaves the size rule in charge.
  const MergedStacks silent_hint = merge_stacks(uneven, 5, {4});
  EXPECT_FALSE(silent_hint.groups[0].likely_culprit);
  EXPECT_TRUE(silent_hint.groups[1].likely_culprit);
}

TEST(StackMerge, RankListsCompressRuns) {
  std::vector<RankStacks> answers;
  for (int r = 0; r < 19; ++r) answers.push_back(rank_with(r, r == 8 ? loading_data() : in_collective(7)));
  const MergedStacks merged = merge_stacks(answers, 20);

  EXPECT_EQ(format_merged_stacks(merged, 20),
            "  ranks 0-7,9-18 (18 of 20): train.py:7 train_step (dist.all_reduce(t)) -> distributed_c10d.py:1536 "
            "all_reduce\n"
            "  rank 8 (1 of 20): train.py:35 <module> (batch = next(loader)) -> data.py:12 load (time.sleep(100))"
            "   <- likely culprit\n"
            "  rank 19 (1 of 20): did not answer\n");
}

TEST(StackMerge, DisplayKeepsTheInnermostUserFrames) {
  const MergedStacks merged = merge_stacks({rank_with(0, deep_user_stack())}, 1);

  ASSERT_EQ(merged.groups.size(), 1u);
  const StackGroup& g = merged.groups[0];
  EXPECT_TRUE(g.cut);
  EXPECT_EQ(g.frames.front(), "model.py:3 f3");  // f1 and f2 cut, with the library frames beside them
  EXPECT_EQ(g.frames.back(), "distributed_c10d.py:1536 all_reduce");
  EXPECT_EQ(std::count(g.frames.begin(), g.frames.end(), "..."), 6);
  EXPECT_EQ(g.key_frames.size(), 17u);
  EXPECT_EQ(format_merged_stacks(merged, 1),
            "  rank 0 (1 of 1): ... model.py:3 f3 -> ... -> model.py:4 f4 -> ... -> model.py:5 f5 -> ... -> "
            "model.py:6 f6 -> ... -> model.py:7 f7 -> ... -> model.py:8 f8 -> ... -> distributed_c10d.py:1536 "
            "all_reduce\n");

  const std::vector<StackFrame> deep = deep_user_stack();
  const std::vector<StackFrame> six_users(deep.begin() + 4, deep.end());
  EXPECT_FALSE(merge_stacks({rank_with(0, six_users)}, 1).groups[0].cut);
}

TEST(StackMerge, AtMostEightGroupsShown) {
  std::vector<RankStacks> answers;
  for (int r = 0; r < 10; ++r) answers.push_back(rank_with(r, in_collective(100 + r)));
  const std::string text = format_merged_stacks(merge_stacks(answers, 10), 10);

  EXPECT_THAT(text, HasSubstr("  rank 7 (1 of 10): "));
  EXPECT_THAT(text, Not(HasSubstr("  rank 8 (1 of 10): ")));
  EXPECT_THAT(text, HasSubstr("  and 2 more groups (2 ranks)\n"));
  EXPECT_THAT(text, HasSubstr("the 10 groups differ"));
}

TEST(StackMerge, LikelyCulpritShownBeyondEightGroups) {
  std::vector<RankStacks> answers;
  for (int r = 0; r < 20; ++r) answers.push_back(rank_with(r, in_collective(100 + r / 2)));  // 10 pairs
  answers.push_back(rank_with(20, loading_data()));
  const std::string text = format_merged_stacks(merge_stacks(answers, 21), 21);

  EXPECT_THAT(text, HasSubstr("  rank 20 (1 of 21): train.py:35"));
  EXPECT_THAT(text, HasSubstr("  and 3 more groups (6 ranks)\n"));
}

TEST(StackMerge, SixteenThousandRanks) {
  constexpr int kWorld = 16384;
  std::vector<StackFrame> deep = deep_user_stack();
  std::vector<RankStacks> answers;
  answers.reserve(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    if (r != 12345) answers.push_back(rank_with(r, r == 777 ? loading_data() : deep));
  }
  const MergedStacks merged = merge_stacks(answers, kWorld);

  ASSERT_EQ(merged.groups.size(), 2u);
  EXPECT_EQ(merged.groups[0].count, kWorld - 2);
  EXPECT_THAT(merged.groups[1].ranks, ElementsAre(777));
  EXPECT_TRUE(merged.groups[1].likely_culprit);
  EXPECT_THAT(merged.ranks_missing, ElementsAre(12345));
  EXPECT_THAT(format_merged_stacks(merged, kWorld),
              HasSubstr("  ranks 0-776,778-12344,12346-16383 (16382 of 16384): "));
}

}  // namespace
}  // namespace ddp
