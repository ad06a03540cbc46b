#pragma once
// Runs a single-node job from a LaunchPlan: lays out the log directories,
// starts the supervisor under the event loop, routes output and writes the
// failure reports. Returns ddplaunch's exit code.

#include "topology/launch_plan.h"

namespace ddp {

class OrphanSentinel;

/// sentinel may be null. Call with the handled signals already blocked.
int run_launch(const LaunchPlan& plan, OrphanSentinel* sentinel);

}  // namespace ddp
