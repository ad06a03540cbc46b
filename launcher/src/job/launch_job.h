#pragma once
// Runs a single-node job from a LaunchPlan: lays out the log directories,
// starts the supervisor under the event loop, routes output and writes the
// failure reports. Returns ddplaunch's exit code.

#include <functional>
#include <string>

#include "topology/launch_plan.h"

namespace ddp {

class OrphanSentinel;

/// A job run with --detach (detach/background_start.h): the console log its
/// agent writes to (recorded for `attach`), and what to call once the job is
/// registered (the command the user typed may then return), with whether its
/// record could be written.
struct DetachedRun {
  std::string console;
  std::function<void(bool recorded)> registered;
};

/// sentinel and detached may be null. Call with the handled signals already blocked.
int run_launch(const LaunchPlan& plan, OrphanSentinel* sentinel, const DetachedRun* detached = nullptr);

}  // namespace ddp
