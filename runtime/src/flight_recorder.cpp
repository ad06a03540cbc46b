#include "ddp/runtime/flight_recorder.h"

#include <algorithm>

namespace ddp {

const char* to_string(CollectiveState state) {
  switch (state) {
    case CollectiveState::kEnqueued: return "enqueued";
    case CollectiveState::kStarted: return "started";
    case CollectiveState::kCompleted: return "completed";
    case CollectiveState::kFailed: return "failed";
  }
  return "unknown";
}

FlightRecorder::FlightRecorder(size_t capacity) : ring_(std::max<size_t>(capacity, 1)) {}

uint64_t FlightRecorder::enqueue(std::string op, int64_t bytes, std::string dtype, int bucket, SteadyTime now) {
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t seq = next_++;
  CollectiveRecord& r = ring_[seq % ring_.size()];
  r = CollectiveRecord{};
  r.sequence = seq;
  r.op = std::move(op);
  r.bytes = bytes;
  r.dtype = std::move(dtype);
  r.bucket = bucket;
  r.enqueued = now;
  return seq;
}

CollectiveRecord* FlightRecorder::find(uint64_t sequence) {
  CollectiveRecord& r = ring_[sequence % ring_.size()];
  return r.sequence == sequence ? &r : nullptr;
}

void FlightRecorder::mark_started(uint64_t sequence, SteadyTime now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (CollectiveRecord* r = find(sequence)) {
    r->state = CollectiveState::kStarted;
    r->started = now;
  }
}

void FlightRecorder::mark_ended(uint64_t sequence, bool ok, SteadyTime now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (CollectiveRecord* r = find(sequence)) {
    r->state = ok ? CollectiveState::kCompleted : CollectiveState::kFailed;
    r->ended = now;
  }
  if (ok) last_completed_ = std::max(last_completed_, sequence);
}

std::vector<CollectiveRecord> FlightRecorder::tail(size_t n) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CollectiveRecord> out;
  const uint64_t last = next_ - 1;
  const uint64_t count = std::min<uint64_t>({n, last, ring_.size()});
  for (uint64_t seq = last - count + 1; seq <= last && count > 0; ++seq) out.push_back(ring_[seq % ring_.size()]);
  return out;
}

uint64_t FlightRecorder::last_enqueued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return next_ - 1;
}

uint64_t FlightRecorder::last_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_completed_;
}

}  // namespace ddp
