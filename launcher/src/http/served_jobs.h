#pragma once
// The jobs the metrics port shows, as plain functions over a coordinator's
// jobs (so the HTTP server can be tested with fakes), and the /status.json
// document built from a job's status.
//
// Threading: a JobSource is called from the HTTP server's threads; the
// coordinator's is thread-safe (it takes the coordinator's lock briefly, and
// each status_json() call the job's own mutex).

#include <functional>
#include <string>
#include <vector>

namespace ddp {

class Coordinator;

struct ServedJob {
  std::string id;
  /// The job's own token comparison (constant time).
  std::function<bool(const std::string& token)> token_matches;
  /// CoordinatorJob::status_json(): what `ddplaunch status` reads.
  std::function<std::string()> status_json;
};

/// The jobs served now, in a stable order.
using JobSource = std::function<std::vector<ServedJob>()>;

/// Every job `coordinator` knows now. The coordinator must outlive the
/// source and everything that calls it.
JobSource coordinator_jobs(Coordinator& coordinator);

/// What `ddplaunch status --json` prints for this status_json(): the same
/// document with each rank's "state" in the table's words (running, in
/// collective, late, silent, exited, no heartbeats), on one line with a
/// final line feed. Text that is not JSON comes back as it is.
std::string status_document(const std::string& status_json);

}  // namespace ddp
