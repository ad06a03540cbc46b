#pragma once
// Stack merge: every rank's stacks of a hung job, ranks grouped by identical
// stack, so that the group out of step stands out. Thousands of ranks waiting
// in the same all_reduce read as one line; the rank still loading data reads
// as another.
//
// Rules:
//  - Frame kinds (classify_frame): `unknown` has neither file nor function;
//    `library` is code the program calls but did not write: the Python
//    standard library and installed packages ("/site-packages/",
//    "/dist-packages/", "/lib/python3", "<frozen ...>"), torch's own files
//    ("/torch/"), system and toolkit libraries (files under /lib, /usr/lib,
//    /usr/include, ...; object files libc, libstdc++, libtorch*, libc10,
//    libgloo, libnccl, libgrpc, libcuda*, libpython, ...; C++ names in std::,
//    torch::, c10::, at::, gloo::, grpc::, ...; C names reserved to the
//    implementation such as _start or __libc_start_main), and the ddp runtime
//    (its sources, libddp*, and names in ddp:: other than the example
//    programs' ddp::train:: and ddp::bench::) with the launcher's Python
//    companion (_ddplaunch_companion, sitecustomize.py). Everything else is
//    `user`.
//  - Key stack: a rank's main thread (ThreadStack::main, else its first
//    thread), compared by function, file and line of every frame (the code
//    text follows from file and line). A rank that answered without frames is
//    keyed by its note, e.g. "stopped by a signal (state T): it cannot answer".
//    An asked rank with no RankStacks at all did not answer.
//  - Groups: ranks with equal keys, ranks ascending; groups by size
//    descending, then lowest rank. Hashing keeps this linear in the number of
//    frames (16,384 ranks are fine).
//  - Display (outermost first): user frames as "file_basename:line function
//    (code)"; each run of library or unknown frames folds into "..."; the
//    innermost frame, where the rank waits, is always shown. At most the last
//    kMaxUserFrames user frames; the text says "... " before a cut stack.
//  - Likely culprit: with a hint (the hang detector's culprits), the groups
//    holding a hinted rank, where there are at least 2 groups. Without one, when there are at least 2 groups and
//    exactly one is strictly smaller than every other, that group. Two ranks
//    in two groups name none: the text says the groups differ.
//
// Ownership and threading: pure functions over values; results own their
// data (nothing points into the arguments). Safe from any thread.

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "stacks/rank_stacks.h"

namespace ddp {

enum class FrameKind { kUser, kLibrary, kUnknown };
/// "user", "library", "unknown".
const char* to_string(FrameKind kind);

FrameKind classify_frame(const StackFrame& frame);

/// "train.py:41 train_step (loss.backward())"; C++ parameter lists shortened
/// to "(...)"; "??" for a frame with neither file nor function.
std::string format_frame(const StackFrame& frame);

/// The display keeps this many user frames, the innermost ones.
constexpr size_t kMaxUserFrames = 6;

struct StackGroup {
  std::vector<int> ranks;           // ascending
  int count = 0;                    // ranks.size()
  std::vector<std::string> frames;  // folded display, outermost first; the innermost frame last
  bool cut = false;                 // outer user frames left out (more than kMaxUserFrames)
  std::string innermost;            // display of the innermost frame: where the ranks wait
  std::vector<StackFrame> key_frames;  // the full key stack, outermost first
  std::string note;                 // ranks that answered without frames: what they said
  bool likely_culprit = false;
};

struct MergedStacks {
  std::vector<StackGroup> groups;   // by size descending, then lowest rank
  std::vector<int> ranks_missing;   // asked but did not answer, ascending
  int asked = 0;                    // ranks 0..asked-1 were asked (the world size)
};

/// Groups `answers` (one RankStacks per rank; a rank's later duplicates and
/// negative ranks are ignored) of the ranks 0..asked-1. `culprit_hint`: ranks
/// the hang detector blames; when any of them answered, their groups are the
/// likely culprits instead of the size rule.
MergedStacks merge_stacks(const std::vector<RankStacks>& answers, int asked,
                          const std::vector<int>& culprit_hint = {});

/// One line per group, at most 8 groups (likely culprits always among them)
/// then "and N more groups", a line for the ranks that did not answer, and a
/// line when the groups differ but none stands out. `asked` is the "of N".
///   "  ranks 0,1 (2 of 3): train.py:41 <module> (loss.backward()) -> ... ->
///      __init__.py:197 backward"
///   "  rank 2 (1 of 3): train.py:35 <module> (batch = next(loader)) ->
///      data.py:12 load (time.sleep(100))   <- likely culprit"
/// (each one line).
/// Rank lists write runs of three or more as ranges: "0-7,9".
std::string format_merged_stacks(const MergedStacks& merged, int asked);

/// {"asked", "groups": [{"ranks", "count", "stack" (display strings), "cut",
/// "innermost", "likely_culprit", "note" (when set), "frames": [{"function",
/// "file", "line", "code", "kind"}]}], "did_not_answer": [ranks]}.
nlohmann::json merged_stacks_to_json(const MergedStacks& merged);

}  // namespace ddp
