#include "cli/job_end.h"

#include <cstdio>

namespace ddp {

int report_job_end(const JobRecord& job, bool with_summary) {
  if (with_summary && !job.summary.empty()) std::fprintf(stderr, "%s", job.summary.c_str());
  if (!job.exit_code) {
    std::fprintf(stderr, "ddplaunch: job %s was lost: its agent (pid %d) was killed before it recorded its end\n",
                 job.job_id.c_str(), job.pid);
    return 1;
  }
  std::fprintf(stderr, "ddplaunch: job %s ended with exit code %d\n", job.job_id.c_str(), *job.exit_code);
  return *job.exit_code;
}

}  // namespace ddp
