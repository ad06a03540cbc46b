#pragma once
// This user's jobs on this machine, running and recent. Every agent writes
// <agent_socket_dir()>/jobs/<job id>.<pid>.json (mode 0600, in a 0700 folder
// of this user: it holds the token) with the coordinator's endpoint, so that
// `status`, `stacks`, `attach`, `logs`, `stop` and `list` find the job without
// being told; the agent keeps it current (world size, restarts, a coordinator
// that moved) and, at its end, records the exit code and the closing summary.
// Ended records are kept for `list` and `attach` (the newest kKeptEndedJobs);
// a record whose agent was killed before it could end it reads as lost.
//
// Threading: JobRegistration is used from the thread that runs the job; the
// free functions read the folder and may run anywhere.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

enum class JobState { kRunning, kSucceeded, kFailed, kStopped, kLost };
const char* to_string(JobState s);

struct JobRecord {
  std::string job_id;
  std::string endpoint;  // coordinator host:port
  std::string token;
  std::string tls_cert, tls_key, tls_ca;
  int pid = 0;           // the agent (ddplaunch) process
  uint64_t pid_start_ticks = 0;  // when it started (process_identity.h): a recycled pid is not it
  int stop_signal = 0;   // what `stop` sends it: SIGTERM, unless --signals-to-handle left it out
  double started_unix_s = 0;
  // What `list`, `attach` and `logs` show.
  std::string log_dir;   // LOGDIR/<job id>
  std::string console;   // the console log of a detached agent, else empty
  int world_size = 0;    // 0 until the first rendezvous
  int local_ranks = 0;
  int node_rank = -1;    // this agent's node in the world; -1 until the first rendezvous
  int restarts = 0;      // attempts started after the first
  JobState state = JobState::kRunning;
  std::optional<int> exit_code;  // once ended
  double ended_unix_s = 0;
  std::string summary;   // the closing summary the agent printed, if any

  bool running() const { return state == JobState::kRunning; }
};

inline constexpr int kKeptEndedJobs = 50;

/// RAII: the job's record for the agent's lifetime. An agent that leaves
/// without finish() (an exception) records exit code 70 (internal error).
class JobRegistration {
 public:
  /// Fills in pid_start_ticks for job.pid, and started_unix_s (now) when 0.
  explicit JobRegistration(const JobRecord& job);
  ~JobRegistration();
  JobRegistration(const JobRegistration&) = delete;
  JobRegistration& operator=(const JobRegistration&) = delete;
  /// The job's coordinator moved (failover to the next endpoint). Each update
  /// replaces the file at once (rename), so a reader never sees half of it.
  void update_endpoint(const std::string& endpoint);
  /// An attempt started with this many ranks in all and here, this agent
  /// being node `node_rank` (two agents of one job on one machine are two
  /// records: the node tells them apart).
  void update_attempt(int attempt, int world_size, int local_ranks, int node_rank);
  /// The agent's end: its exit code, whether a stop signal ended it, and the
  /// closing summary it printed. Ended records beyond kKeptEndedJobs go.
  void finish(int exit_code, bool stopped_by_signal, const std::string& summary);
  const JobRecord& job() const { return job_; }
  /// Whether the record could be written (a refused registry folder, a full
  /// disk): without it, `attach`, `stop` and `status` cannot find the job.
  bool written() const { return written_; }

 private:
  void write();
  JobRecord job_;
  std::string path_;
  bool written_ = false;
};

/// Every registered job whose agent is alive, oldest first.
std::vector<JobRecord> running_jobs();

/// Every record, running, ended and lost, oldest first.
std::vector<JobRecord> all_jobs();

/// The record of the agent `pid` of job `job_id` as it is now, if any.
std::optional<JobRecord> find_job(const std::string& job_id, int pid);

/// The final record of `job`'s agent once it has ended; nullopt while it
/// runs. A record that went (pruned) reads as lost.
std::optional<JobRecord> end_of(const JobRecord& job);

/// The state an agent's exit code gives (see exit_codes.h).
JobState state_of_exit(int exit_code, bool stopped_by_signal);

}  // namespace ddp
