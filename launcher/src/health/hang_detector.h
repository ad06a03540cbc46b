#pragma once
// HangDetector: the coordinator's hang, desync and straggler detection over
// the workers' heartbeats (RankReport). Pure and clock-driven: no gRPC, no
// threads, no sleeping; the caller feeds reports and asks check() every
// ~100 ms, and unit tests drive it with FakeClock.
//
// What it tells apart (DESIGN.md "Heartbeats and hangs"):
//  - silent rank: a monitored rank sent no heartbeat for hang_timeout;
//  - stuck collective: no rank made progress (step or last completed
//    collective) for hang_timeout while heartbeats are fresh; names the
//    smallest open collective k, the ranks waiting in it and the ranks that
//    never entered it (the culprits);
//    (a rank it would blame that itself waits in a collective of another
//    process group, a Python rank's dist.new_group, passes the blame on to
//    the member of that group that never entered it);
//  - desync: two ranks issued different op, bytes or dtype as collective k
//    (no timeout: reported once every rank has reported k, or two heartbeat
//    intervals after it was noticed; health/desync_check.h);
//  - trouble warnings (warnings only, never a verdict): stragglers, a GPU
//    used far less than the others', throttling, Xid and ECC errors, memory
//    close to full (health/trouble_warnings.h, fed the same reports).
// Dead processes are not its business: the coordinator sees exit statuses.
//
// Ranks that never sent a heartbeat are unmonitored (plain scripts without
// the runtime): never blamed, listed in reports as supervised by process
// state only. Sequence numbers are one sequence per rank for the default
// process group, as the ddp runtime numbers them; other groups' collectives
// are numbered per group (RankReport::subgroups).
//
// Ownership and threading: a HangDetector is NOT thread-safe. Its owner
// (CoordinatorJob) calls every method under its own mutex. It keeps a
// reference to `clock`, which must outlive it.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/common/clock.h"
#include "health/desync_check.h"
#include "health/hang_verdict.h"
#include "health/health_view.h"
#include "health/rank_health.h"
#include "health/trouble_warnings.h"
#include "metrics/resource_history.h"

namespace ddp {

struct HangConfig {
  Duration hang_timeout = std::chrono::seconds(300);
  Duration heartbeat_interval = std::chrono::seconds(1);
  /// The warnings' thresholds; their phase_interval is set to half the
  /// heartbeat interval.
  TroubleConfig trouble;
};

class HangDetector {
 public:
  /// `clock` is kept by reference and must outlive the detector.
  HangDetector(HangConfig config, int world_size, const Clock& clock);

  /// A heartbeat of one rank, received `age` ago (the agent held it that
  /// long). Reports for ranks outside [0, world_size) or from exited ranks
  /// are ignored; one older than the rank's last report only adds the
  /// collectives it shows to the desync check. Its resource sample, if
  /// any, is kept whenever it is newer than the one kept (exited ranks too);
  /// a resources_only report is that and nothing more: it does not make the
  /// rank monitored.
  /// Taken by value: a caller done with its report moves it in, and it is kept as it is.
  void on_report(RankReport report, Duration age = Duration::zero());

  /// The rank's process ended (whatever its status): stop expecting
  /// heartbeats from it. It is never called silent afterwards; it can still
  /// be named as a rank that never entered a collective the others wait in.
  void on_rank_exited(int rank);

  /// A new generation: forget every rank, verdicts and warnings.
  void reset(int world_size);

  /// Evaluates at clock.now(). Returns a verdict once something is wrong
  /// (priority: desync, silent rank, stuck collective; while a desync waits
  /// for ranks yet to report its collective, nothing); it is returned once
  /// per generation, later calls return nullopt until reset() (see
  /// last_verdict()). Call every ~100 ms: a silent rank is then reported
  /// within hang_timeout + 2 heartbeat intervals of its last heartbeat.
  std::optional<HangVerdict> check();

  /// As check(), but a desync is reported without waiting for the ranks
  /// that have not reported its collective yet (check() waits up to two
  /// heartbeat intervals for them). For when a rank has failed: its agent
  /// sent its last heartbeat before it reported the failure, and the ranks
  /// that failed will send no more.
  std::optional<HangVerdict> check_at_once();

  /// The verdict check() returned in this generation, if any.
  const std::optional<HangVerdict>& last_verdict() const { return verdict_; }

  /// Evaluates the trouble warnings at clock.now() and returns those given
  /// now (each once per rank, kind and GPU per generation). Call every
  /// ~100 ms, as check().
  std::vector<TroubleWarning> take_warnings();

  /// The health view for `ddplaunch status`: {"world_size",
  /// "monitored_ranks", "seconds_since_progress", "hang_timeout_s", "ranks":
  /// [per rank, by rank, as in HangVerdict::details, plus "warnings": the
  /// kinds given about it (TroubleWarnings::rank_json) when any],
  /// "warnings": the last warnings given (TroubleWarnings::recent_json()),
  /// "warnings_total": how many were given in this generation}. "monitored"
  /// is false for ranks that never sent a heartbeat.
  nlohmann::json snapshot() const;
  /// What snapshot() formats, copied: cheap enough to take under the
  /// owner's mutex (health_view.h) and format after releasing it.
  HealthView view() const;

  /// The last report of every rank that sent one in this generation.
  std::vector<RankReport> latest_reports() const;
  /// The fastest step time (seconds) any rank reported in this generation, 0
  /// if none did: a rank's last report may be of one slow step (an
  /// evaluation, a checkpoint) among fast ones.
  double fastest_step_seconds() const { return fastest_step_seconds_; }

  /// Whether any rank has sent a heartbeat in this generation.
  bool any_monitored() const;

  int world_size() const { return static_cast<int>(ranks_.size()); }
  const HangConfig& config() const { return config_; }

 private:
  struct RankState {
    bool monitored = false;
    bool exited = false;
    // The last report, never null; shared with the HealthView copies, so
    // replaced on each heartbeat, never changed in place.
    std::shared_ptr<const RankReport> report = std::make_shared<const RankReport>();
    SteadyTime received_at{};  // when the report was made (arrival - age)
    SteadyTime active_at{};    // the report where its activity last changed; {}: never seen to
    // The resource sample where its process last wrote or kept half a core
    // busy (saving()); {}: never.
    SteadyTime saving_at{};
    // The agent's latest sample, heartbeats or not; shared and replaced as `report`.
    std::shared_ptr<const RankResources> resources;
    SteadyTime resources_at{};               // when it was taken (arrival - its age)
    ResourceHistory history;                 // the recent samples, for the reports' notes
  };
  struct OpenCollective {  // the smallest collective open on some rank
    uint64_t sequence = 0;   // 0: none
    std::optional<CollectiveSeen> info;  // from a rank that knows its op
    std::vector<int> waiting;            // ranks with it open, ascending
    Duration waited{};                   // the longest wait in it so far
  };

  OpenCollective find_open(const std::vector<int>& candidates, SteadyTime now) const;
  /// check() and check_at_once(): the verdict, once per generation.
  std::optional<HangVerdict> decide(Duration desync_wait);
  /// `desync_wait`: how long a desync verdict waits for ranks yet to report collective k.
  std::optional<HangVerdict> evaluate(SteadyTime now, Duration desync_wait) const;
  std::optional<HangVerdict> desync_verdict(SteadyTime now, Duration wait) const;
  std::optional<HangVerdict> silent_verdict(SteadyTime now) const;
  std::optional<HangVerdict> stuck_verdict(SteadyTime now) const;
  /// Whether the rank still runs and went through a phase within the hang
  /// timeout (RankReport::activity changed): it works toward whatever it
  /// has not reached yet, if slowly, and a stuck verdict does not blame it.
  bool working(int rank, SteadyTime now) const;
  /// Whether the rank saves, if slowly: its last report is of the checkpoint
  /// phase, and within the hang timeout its process wrote (bytes written or
  /// page cache dirtied, rank_resources.h) or kept half a core busy
  /// (serializing, checksumming), by the agent's resource samples. A write
  /// stuck on storage does neither. torch.save writes a tensor with the GIL
  /// held, so a Python rank saving a big checkpoint sends no heartbeat
  /// meanwhile: while it saves it is neither silent nor stuck.
  bool saving(int rank, SteadyTime now) const;
  /// The verdict where a rank in `among` waits in a subgroup collective that
  /// a member never entered (subgroup_waits.h); `then` ends its summary.
  /// Members missing from it that are working() are not blamed: where every
  /// missing member works, it returns a verdict with no culprits, which the
  /// caller takes for "no hang yet".
  std::optional<HangVerdict> subgroup_verdict(const std::vector<int>& among, SteadyTime now,
                                              const std::string* then) const;
  /// The verdict where no rank in `active` waits in a collective but some
  /// wait in sends or receives (peer_waits.h): the ranks the waits end at,
  /// or the ranks of a cycle. nullopt: no rank waits for a given peer.
  std::optional<HangVerdict> peer_verdict(const std::vector<int>& active, SteadyTime now, Duration idle) const;
  std::string describe(int rank) const;
  /// "rank 3 (host h3, pid 103)": how a warning names a rank.
  std::string who(int rank) const;
  RankView rank_view(int rank, SteadyTime now) const;
  nlohmann::json details(const HangVerdict& verdict, SteadyTime now) const;

  HangConfig config_;
  const Clock& clock_;
  std::vector<RankState> ranks_;
  SteadyTime last_progress_{};
  double fastest_step_seconds_ = 0;
  DesyncCheck desync_;
  std::optional<HangVerdict> verdict_;
  TroubleWarnings trouble_;
};

}  // namespace ddp
