#pragma once
// FlightRecorder: every collective the runtime issues, numbered in issue
// order, with what it moved and when it started and ended. The heartbeat
// carries its tail, so the launcher can tell which rank never entered
// collective k when the others wait in it. A fixed-size ring: recording is
// O(1) and memory stays bounded however long the job runs.
//
// Threading: thread-safe (the caller's thread enqueues, a backend's thread
// marks start and end, the heartbeat thread reads).

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/common/clock.h"

namespace ddp {

enum class CollectiveState { kEnqueued, kStarted, kCompleted, kFailed };
const char* to_string(CollectiveState state);

struct CollectiveRecord {
  uint64_t sequence = 0;  // 1, 2, ... per communicator
  std::string op;         // "all_reduce", "broadcast", "all_gather", "barrier"
  int64_t bytes = 0;
  std::string dtype;      // "float32", ...
  int bucket = -1;        // the reducer's bucket, -1 for other callers
  CollectiveState state = CollectiveState::kEnqueued;
  SteadyTime enqueued{};
  SteadyTime started{};
  SteadyTime ended{};
};

class FlightRecorder {
 public:
  explicit FlightRecorder(size_t capacity = 1024);

  /// Records a new collective; returns its sequence number.
  uint64_t enqueue(std::string op, int64_t bytes, std::string dtype, int bucket, SteadyTime now);
  void mark_started(uint64_t sequence, SteadyTime now);
  void mark_ended(uint64_t sequence, bool ok, SteadyTime now);

  /// The last n records, oldest first.
  std::vector<CollectiveRecord> tail(size_t n) const;
  uint64_t last_enqueued() const;
  uint64_t last_completed() const;

 private:
  CollectiveRecord* find(uint64_t sequence);  // null once overwritten

  mutable std::mutex mutex_;
  std::vector<CollectiveRecord> ring_;
  uint64_t next_ = 1;
  uint64_t last_completed_ = 0;
};

}  // namespace ddp
