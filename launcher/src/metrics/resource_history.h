#pragma once
// ResourceHistory: what one rank's recent resource samples add up to, kept
// by the coordinator's health view so that a hang report can say what the
// rank's devices did before it: "rank 3's GPU 0 was at 0% for the 40 s before
// the hang", "rank 5's GPU 1 was OOM-close: 79.1 of 80.0 GiB". It keeps no
// list of samples, only when each idle spell began (constant size per rank:
// the coordinator holds one per rank of jobs of 16,384 ranks).
//
// Threading: none (its owner, HangDetector, runs under CoordinatorJob's lock).

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "metrics/rank_resources.h"

namespace ddp {

class ResourceHistory {
 public:
  /// A sample taken at `at`; one not newer than the last is ignored.
  void add(SteadyTime at, const RankResources& r);

  /// What stands out up to `now`, one sentence each naming `rank`, given its
  /// latest sample: a GPU idle (util at most 1%) in every sample of the last
  /// 10 s or more (in a hang the waiting ranks' GPUs spin in NCCL's kernels,
  /// so the idle one stands out); a GPU's memory at 95% or more. `before`
  /// ends the sentences ("before the hang"). Idle CPUs are not noted: in a
  /// hang on CPU every waiting rank's is.
  std::vector<std::string> notes(int rank, const RankResources& latest, SteadyTime now,
                                 const std::string& before) const;

 private:
  std::optional<SteadyTime> last_at_;
  std::map<int, SteadyTime> gpu_idle_since_;  // by GPU index: the first sample of its idle spell now
};

}  // namespace ddp
