#pragma once
// WorkerHealthBoard: the latest heartbeat of each of this node's workers, as
// the local services receive them (the runtime's gRPC service and the Python
// companion's channel), until the agent's heartbeat thread forwards them to
// the coordinator; and the coordinator's requests for stack dumps on their
// way to the workers, with the workers' answers on their way back.
//
// A worker that does not answer a request for its stacks within
// `answer_timeout` (stopped by a signal, a Python program holding the GIL in
// C code, a program without heartbeats) is answered for: the board describes
// its process as the kernel sees it (process_state.h).
//
// It also keeps the latest resource sample of each worker (CPU, memory and
// GPUs of its process, metrics/resource_monitor.h): the heartbeat thread
// calls sample_resources() at each heartbeat, by the pids the supervisor
// gave, so ranks without heartbeats (plain scripts) are sampled too.
//
// Threading: thread-safe (gRPC and channel threads write, the heartbeat
// thread reads). The stacks listener and the resource sampler are called
// without the board's lock held.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "companion/collective_announcements.h"
#include "coordinator/coordinator_job.h"
#include "stacks/rank_stacks.h"

namespace ddp {

class WorkerHealthBoard {
 public:
  /// Says what a process that did not answer is doing, by pid.
  using ProcessDescriber = std::function<std::string(int pid)>;
  /// Takes the Python stacks of a process that did not answer, without its
  /// help (a signal to faulthandler); nullopt where it cannot. May block.
  using SignalStackReader = std::function<std::optional<std::vector<ThreadStack>>(int pid)>;

  /// clock: kept by reference, outlives the board. describe: defaults to
  /// describe_unanswering_process (process_state.h); read_by_signal to
  /// python_stacks_by_signal (python_signal_stacks.h) waiting up to 0.3 s.
  explicit WorkerHealthBoard(const Clock& clock, Duration answer_timeout = std::chrono::seconds(2),
                             ProcessDescriber describe = {}, SignalStackReader read_by_signal = {});

  void record(RankReport report);
  /// Where a Python rank announces each collective as it starts. Its reports
  /// from then on include what it announced after they were made, even
  /// once its process has gone. Kept until replaced or clear().
  void attach_announcements(int rank, std::shared_ptr<const CollectiveAnnouncements> announcements);
  /// The latest report of each worker, with how long it has been held here
  /// (counted from its newest announcement where that is newer).
  std::vector<ForwardedReport> latest() const;
  /// A new generation: forget every worker, request, answer and sample.
  void clear();

  /// Samples the processes of the given ranks (rank -> pid); the ranks it
  /// returns nothing for are gone. Called without the board's lock.
  using ResourceSampler = std::function<std::map<int, RankResources>(const std::map<int, int>& pid_by_rank)>;
  /// Set once, before workers start; none: no samples are taken.
  void set_resource_sampler(ResourceSampler sampler);
  /// Samples every worker the supervisor started (heartbeat thread). A
  /// worker whose process is gone keeps its last sample, marked process_gone.
  void sample_resources();
  /// The latest sample of each worker, by rank, aged as of now.
  std::map<int, RankResources> resources() const;
  /// latest() with each worker's latest sample attached, plus a
  /// resources_only report for each sampled worker that sent no heartbeat:
  /// what the agent's heartbeat forwards.
  std::vector<ForwardedReport> latest_with_resources() const;
  /// The supervisor started `rank` as `pid`: whom to describe if it cannot answer.
  void set_worker_pid(int rank, int pid);

  void request_stack_dumps(const std::vector<int>& ranks);
  /// True once per request: the worker should dump its stacks now. The
  /// request stays open until the worker answers or times out.
  bool take_stack_dump_request(int rank);
  /// A worker's answer. Ignored unless its rank was asked.
  void record_stacks(RankStacks stacks);
  /// The answers since the last call, and for each worker asked more than
  /// answer_timeout ago that has not answered, the stacks its faulthandler
  /// gave on a signal, else a description of its process. Blocks up to the
  /// signal reader's wait (0.3 s) for each Python worker overdue.
  std::vector<RankStacks> take_stacks();
  /// Called after each answer (e.g. to forward it without waiting for the
  /// next heartbeat). Set once, before workers start.
  void set_stacks_listener(std::function<void()> listener);

 private:
  struct DumpRequest {
    SteadyTime asked_at{};
    bool delivered = false;
  };

  const Clock& clock_;
  const Duration answer_timeout_;
  ProcessDescriber describe_;
  SignalStackReader read_by_signal_;
  std::function<void()> stacks_listener_;
  mutable std::mutex mutex_;
  std::map<int, std::pair<RankReport, SteadyTime>> latest_;  // by rank
  std::map<int, std::shared_ptr<const CollectiveAnnouncements>> announcements_;  // by rank
  std::map<int, int> pids_;                                  // by rank, from the supervisor
  std::map<int, DumpRequest> dump_requests_;                 // by rank, until answered
  std::vector<RankStacks> answers_;
  ResourceSampler sampler_;
  std::map<int, std::pair<RankResources, SteadyTime>> resources_;  // by rank: sample, when taken
  uint64_t cleared_ = 0;  // counts clear(): a sample taken across one is dropped
};

}  // namespace ddp
