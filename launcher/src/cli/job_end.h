#pragma once
// How `attach`, `logs -f` and `stop` tell that a job ended: a last line with
// its exit code (attach and stop also exit with it; logs exits 0).

#include "job/job_registry.h"

namespace ddp {

/// Prints the job's closing summary first when `with_summary` (attach has
/// shown it already: it is in the console), then
/// "ddplaunch: job ID ended with exit code C" (stderr). Returns C; 1 for a
/// job whose agent was killed before it recorded its end.
int report_job_end(const JobRecord& job, bool with_summary);

}  // namespace ddp
