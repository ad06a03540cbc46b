#pragma once
// TraceWriter: spans of one rank's training (forward, backward, each bucket's
// all-reduce, optimizer, checkpoint) collected in memory and written as a
// Chrome trace-event JSON file that chrome://tracing and ui.perfetto.dev open.
// Each rank is a process ("rank R"), compute and communication are two of its
// threads, so the overlap of all-reduce with backward shows directly. Times
// are steady-clock microseconds, one origin for every rank of a host.
//
// Threading: one thread (the training loop).

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/common/clock.h"

namespace ddp::train {

enum class TraceLane { kCompute = 0, kCommunication = 1 };

class TraceWriter {
 public:
  explicit TraceWriter(int rank) : rank_(rank) {}

  void span(const std::string& name, TraceLane lane, SteadyTime start, SteadyTime end, int64_t step,
            int64_t bytes = -1);
  size_t size() const { return spans_.size(); }

  /// Writes the file (throws std::runtime_error naming it on failure).
  void write(const std::string& path) const;

 private:
  struct Span {
    std::string name;
    TraceLane lane;
    SteadyTime start;
    SteadyTime end;
    int64_t step;
    int64_t bytes;
  };
  int rank_;
  std::vector<Span> spans_;
};

/// Where rank r writes when asked for `path`: path itself for rank 0, and
/// "stem.rank<r>.ext" for the others.
std::string trace_path_for_rank(const std::string& path, int rank);

}  // namespace ddp::train
