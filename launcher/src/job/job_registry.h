#pragma once
// The running jobs of this user on this machine, so `ddplaunch status` finds
// a job's coordinator without being told: every agent writes
// <agent_socket_dir()>/jobs/<job id>.json (mode 0600: it holds the token) with
// the coordinator's endpoint, and removes it when it exits. Entries whose
// agent process is gone (killed with SIGKILL) are skipped and cleaned up.

#include <optional>
#include <string>
#include <vector>

namespace ddp {

struct RunningJob {
  std::string job_id;
  std::string endpoint;  // coordinator host:port
  std::string token;
  std::string tls_cert, tls_key, tls_ca;
  int pid = 0;           // the agent (ddplaunch) process
  double started_unix_s = 0;
};

/// RAII: registers the job for the agent's lifetime.
class JobRegistration {
 public:
  explicit JobRegistration(const RunningJob& job);
  ~JobRegistration();
  JobRegistration(const JobRegistration&) = delete;
  JobRegistration& operator=(const JobRegistration&) = delete;
  /// The job's coordinator moved (failover to the next endpoint). The entry
  /// is replaced at once (rename), so a reader never sees half of it.
  void update_endpoint(const std::string& endpoint);

 private:
  void write() const;
  RunningJob job_;
  std::string path_;
};

/// Every registered job whose agent is alive, oldest first.
std::vector<RunningJob> running_jobs();

}  // namespace ddp
