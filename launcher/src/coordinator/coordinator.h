#pragma once
// Coordinator: the jobs one coordinator serves, by job id. Embedded in node
// 0's agent it serves that agent's job (created up front with its token);
// standalone (`ddplaunch serve`) a job is created by its first join and
// forgotten a while after it finishes.
//
// Threading: thread-safe. Jobs are shared_ptr so an RPC in flight keeps its
// job alive while the registry drops it.

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/coordinator_job.h"

namespace ddp {

struct CoordinatorOptions {
  Duration node_timeout = std::chrono::seconds(15);
  Duration finished_job_retention = std::chrono::minutes(10);
};

/// Bounds on what one call may carry; beyond them a call is refused.
struct CoordinatorLimits {
  static constexpr size_t kMaxIdBytes = 256;        // job id, host, comm key
  static constexpr size_t kMaxKeyBytes = 4096;
  static constexpr size_t kMaxValueBytes = 1 << 20;  // 1 MiB
  static constexpr size_t kMaxKeysPerWait = 1 << 16;
  static constexpr int kMaxNodes = 1 << 16;
  static constexpr int kMaxNproc = 1 << 12;
  /// The longest wait a call may ask for (join, KV wait, barrier, an elastic
  /// last call): a year. Longer ones are cut to it, since a larger count of
  /// milliseconds overflows Duration's nanoseconds, and a deadline the clock.
  static constexpr int64_t kMaxWaitMs = int64_t{365} * 24 * 3600 * 1000;
};

/// A call's wait in milliseconds as a Duration: negative is none, longer
/// than CoordinatorLimits::kMaxWaitMs is that.
inline Duration call_wait(int64_t ms) {
  return std::chrono::milliseconds(std::clamp<int64_t>(ms, 0, CoordinatorLimits::kMaxWaitMs));
}

class Coordinator {
 public:
  Coordinator(const Clock& clock, UniqueIdSource& ids, CoordinatorOptions options = {});

  /// Registers a job before any join (the embedded coordinator's own job).
  /// Throws std::logic_error when the id exists already: replacing a job
  /// would orphan the joins parked on it.
  /// takeover: the job continues one whose coordinator was lost (failover).
  void create_job(const std::string& job_id, const std::string& token, const JobConfig& config,
                  const std::optional<Takeover>& takeover = std::nullopt);
  /// The job of an RPC: NotFound for an unknown id, Unauthenticated for a
  /// wrong token (the token itself is never put in a message),
  /// FailedPrecondition for a caller of a later epoch (the job has been
  /// taken over elsewhere: CoordinatorJob::check_epoch).
  Status find(const std::string& job_id, const std::string& token, std::shared_ptr<CoordinatorJob>& job,
              int epoch = 0);
  /// Like find(), but a first join creates the job from the joiner's view.
  Status find_for_join(const std::string& job_id, const std::string& token, const JobConfig& joiner_view,
                       std::shared_ptr<CoordinatorJob>& job, int epoch = 0);
  /// Ticks every job; forgets jobs finished longer ago than the retention.
  void tick();
  /// Answers every parked call of every job with Unavailable.
  void abort_all();
  size_t job_count() const;
  /// Every job known now, by id (the metrics port's view of them).
  std::vector<std::shared_ptr<CoordinatorJob>> jobs() const;
  const UniqueIdSource& ids() const { return ids_; }

 private:
  struct Entry {
    std::shared_ptr<CoordinatorJob> job;
    std::optional<SteadyTime> finished_at;
  };
  const Clock& clock_;
  UniqueIdSource& ids_;
  CoordinatorOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> jobs_;
};

}  // namespace ddp
