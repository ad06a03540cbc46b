#include "membership/failover.h"

namespace ddp {

int takeover_quorum(const Takeover& takeover) {
  const int n = takeover.previous_nnodes;
  // Half (rounded up) wins a tie for the first endpoint after the lost one;
  // after a skipped endpoint only a strict majority is safe.
  const int quorum = takeover.skipped > 0 ? n / 2 + 1 : (n + 1) / 2;
  return quorum > 0 ? quorum : 1;
}

}  // namespace ddp
