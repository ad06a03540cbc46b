#pragma once
// RankSignalIntent: what a SIGTERM means to this node's ranks while a stop at
// a step boundary may be under way (--stop-timeout).
//
// Slurm's --signal, `scancel --signal=TERM`, a Slurm preemption and the end of
// a time limit send SIGTERM to every process of the job step: to ddplaunch and
// to its ranks alike. A rank that dies of it never reaches the step boundary
// ddplaunch is about to ask for. So a rank started with --stop-timeout (the
// Python companion, or the runtime of a LibTorch program) keeps SIGTERM
// instead of dying of it, and reads this small file to learn what to do:
//
//   "stopping"     ddplaunch is stopping the job at a step boundary: a SIGTERM
//                  from outside is ignored, the stop request follows.
//   "terminating"  ddplaunch itself is signalling its ranks (a failure
//                  elsewhere, the stop timeout ran out, a second signal): die.
//   no file        nothing under way: wait briefly for ddplaunch's own SIGTERM
//                  to arrive (the same signal reached it at the same moment),
//                  then die if nothing was arranged.
//
// The file lies in the agent's private runtime folder (node-local, mode
// 0700): ranks of other nodes never share it. Each write is whole (a temporary
// file renamed into place), so a rank never reads half a word.
//
// Ownership: owns the file, removed on destruction. Threading: the event-loop
// thread only.

#include <filesystem>
#include <string>

namespace ddp {

class RankSignalIntent {
 public:
  /// An empty path: every call does nothing (no --stop-timeout).
  explicit RankSignalIntent(std::filesystem::path path);
  ~RankSignalIntent();
  RankSignalIntent(const RankSignalIntent&) = delete;
  RankSignalIntent& operator=(const RankSignalIntent&) = delete;

  /// Where the ranks find it (DDPLAUNCH_SIGNAL_INTENT_FILE); empty when unused.
  const std::filesystem::path& path() const { return path_; }

  /// A stop at a step boundary is under way: outside SIGTERMs are ignored.
  void stopping() { write("stopping"); }
  /// ddplaunch is about to signal its ranks: they die of it.
  void terminating() { write("terminating"); }
  /// A new attempt: nothing under way.
  void clear();

 private:
  void write(const std::string& word);

  const std::filesystem::path path_;
  std::string written_;  // the word in the file now, "" when there is none
};

}  // namespace ddp
