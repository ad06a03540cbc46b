#pragma once
// The job's side of `--sync`: the S3 buckets behind CheckpointSync, the
// download at start, and the report that ends up in the job's summary and
// failure.json. Kept out of launch_job.cpp, which only calls these.
//
// Threading: the agent's main thread.

#include <memory>
#include <string>

#include "sync/checkpoint_sync.h"
#include "topology/launch_plan.h"

namespace ddp {

/// Null without --sync. Otherwise resolves the credentials (a clear warning
/// when there are none: the job runs unsynced), downloads each DIR that is
/// missing or empty, and, when `uploads` (the agent of node 0), starts the
/// uploads in the background.
std::unique_ptr<CheckpointSync> start_checkpoint_sync(const LaunchPlan& plan, bool uploads);

/// At the job's end: waits up to --sync-wait for pending uploads, logs the
/// outcome, adds it as "sync" to the last attempt's failure.json when there
/// is one, and returns the lines for the job's summary ("" when none).
std::string finish_checkpoint_sync(CheckpointSync& sync, const LaunchPlan& plan, int last_attempt);

}  // namespace ddp
