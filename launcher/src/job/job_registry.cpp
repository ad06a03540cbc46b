#include "job/job_registry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/local_agent_service.h"
#include "exit_codes.h"
#include "process/process_identity.h"

namespace ddp {
namespace fs = std::filesystem;
namespace {

// Empty when the folder is not this user's alone: another user could have
// made it (/tmp/ddplaunch-<uid> is a guessable name), or a link in its place,
// to read tokens or plant records, so nothing is read from it or written to it.
fs::path jobs_dir() {
  const fs::path dir = fs::path(agent_socket_dir()) / "jobs";
  std::error_code ec;
  fs::create_directories(dir, ec);
  struct stat st {};
  for (const fs::path& p : {dir.parent_path(), dir}) {
    // lstat, then chmod only a real folder of ours: chmod follows links.
    if (lstat(p.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        ((st.st_mode & 077) != 0 && chmod(p.c_str(), 0700) != 0)) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true)) {
        spdlog::warn("{} is not a private folder of this user: jobs are not registered there", p.string());
      }
      return {};
    }
  }
  return dir;
}

double now_unix_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json to_json(const JobRecord& job) {
  return {{"job_id", job.job_id},
          {"endpoint", job.endpoint},
          {"token", job.token},
          {"tls_cert", job.tls_cert},
          {"tls_key", job.tls_key},
          {"tls_ca", job.tls_ca},
          {"pid", job.pid},
          {"pid_start_ticks", job.pid_start_ticks},
          {"stop_signal", job.stop_signal},
          {"started_unix_s", job.started_unix_s},
          {"log_dir", job.log_dir},
          {"console", job.console},
          {"world_size", job.world_size},
          {"local_ranks", job.local_ranks},
          {"node_rank", job.node_rank},
          {"restarts", job.restarts},
          {"state", to_string(job.state)},
          {"exit_code", job.exit_code ? nlohmann::json(*job.exit_code) : nlohmann::json()},
          {"ended_unix_s", job.ended_unix_s},
          {"summary", job.summary}};
}

JobState parse_state(const std::string& s) {
  for (JobState st : {JobState::kRunning, JobState::kSucceeded, JobState::kFailed, JobState::kStopped}) {
    if (s == to_string(st)) return st;
  }
  return JobState::kLost;
}

std::optional<JobRecord> read_record(const fs::path& path) {
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(path), nullptr, false);
  if (!j.is_object()) return std::nullopt;
  JobRecord job;
  try {
    job.job_id = j.value("job_id", "");
    job.endpoint = j.value("endpoint", "");
    job.token = j.value("token", "");
    job.tls_cert = j.value("tls_cert", "");
    job.tls_key = j.value("tls_key", "");
    job.tls_ca = j.value("tls_ca", "");
    job.pid = j.value("pid", 0);
    job.pid_start_ticks = j.value("pid_start_ticks", uint64_t{0});
    job.stop_signal = j.value("stop_signal", 0);
    job.started_unix_s = j.value("started_unix_s", 0.0);
    job.log_dir = j.value("log_dir", "");
    job.console = j.value("console", "");
    job.world_size = j.value("world_size", 0);
    job.local_ranks = j.value("local_ranks", 0);
    job.node_rank = j.value("node_rank", -1);
    job.restarts = j.value("restarts", 0);
    job.state = parse_state(j.value("state", "running"));
    if (j.contains("exit_code") && j["exit_code"].is_number_integer()) job.exit_code = j["exit_code"].get<int>();
    job.ended_unix_s = j.value("ended_unix_s", 0.0);
    job.summary = j.value("summary", "");
  } catch (const nlohmann::json::exception&) {
    return std::nullopt;  // a field of the wrong type: not a record of ours
  }
  if (job.job_id.empty()) return std::nullopt;
  return job;
}

// The whole record, replacing the file at once (rename): a reader never sees half of it.
bool write_record(const std::string& path, const JobRecord& job) {
  const std::string temporary = path + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  const std::string text = to_json(job).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (written && rename(temporary.c_str(), path.c_str()) == 0) return true;
  unlink(temporary.c_str());
  return false;
}

std::vector<std::pair<fs::path, JobRecord>> read_records() {
  std::vector<std::pair<fs::path, JobRecord>> records;
  const fs::path dir = jobs_dir();
  if (dir.empty()) return records;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::path& path = it->path();
    if (path.extension() != ".json") continue;
    auto job = read_record(path);
    if (!job) continue;
    if (job->running() && !same_process_running(job->pid, job->pid_start_ticks)) {
      // Its agent was killed (SIGKILL) before it could record its end: the
      // record says so from now on, and keeps no secret.
      job->state = JobState::kLost;
      job->token.clear();
      write_record(path.string(), *job);
    }
    records.emplace_back(path, std::move(*job));
  }
  std::sort(records.begin(), records.end(),
            [](const auto& a, const auto& b) { return a.second.started_unix_s < b.second.started_unix_s; });
  return records;
}

// The oldest ended (or lost) records beyond the kept number.
void prune_ended_records() {
  auto records = read_records();
  int ended = static_cast<int>(std::count_if(records.begin(), records.end(), [](const auto& r) { return !r.second.running(); }));
  std::error_code ec;
  for (const auto& [path, job] : records) {
    if (ended <= kKeptEndedJobs) break;
    if (job.running()) continue;
    fs::remove(path, ec);
    --ended;
  }
}

}  // namespace

const char* to_string(JobState s) {
  switch (s) {
    case JobState::kRunning: return "running";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kStopped: return "stopped";
    case JobState::kLost: return "lost";
  }
  return "lost";
}

JobState state_of_exit(int exit_code, bool stopped_by_signal) {
  if (exit_code == exit_code::kSuccess) return JobState::kSucceeded;
  if (stopped_by_signal || exit_code == exit_code::kRequeue) return JobState::kStopped;
  return JobState::kFailed;
}

JobRegistration::JobRegistration(const JobRecord& job) : job_(job) {
  job_.pid_start_ticks = process_start_ticks(job.pid).value_or(0);
  if (job_.started_unix_s == 0) job_.started_unix_s = now_unix_s();
  const fs::path dir = jobs_dir();
  if (!dir.empty()) path_ = (dir / (job.job_id + "." + std::to_string(job.pid) + ".json")).string();
  write();
}

void JobRegistration::update_endpoint(const std::string& endpoint) {
  job_.endpoint = endpoint;
  write();
}

void JobRegistration::update_attempt(int attempt, int world_size, int local_ranks, int node_rank) {
  job_.restarts = attempt;
  job_.world_size = world_size;
  job_.local_ranks = local_ranks;
  job_.node_rank = node_rank;
  write();
}

void JobRegistration::finish(int exit_code, bool stopped_by_signal, const std::string& summary) {
  job_.state = state_of_exit(exit_code, stopped_by_signal);
  job_.exit_code = exit_code;
  job_.ended_unix_s = now_unix_s();
  job_.summary = summary;
  // An ended job cannot be asked anything: its secret has no use any more.
  job_.token.clear();
  write();
  prune_ended_records();
}

void JobRegistration::write() {
  // status will not find a job whose record is not written; the job itself runs on
  written_ = !path_.empty() && write_record(path_, job_);
}

JobRegistration::~JobRegistration() {
  if (job_.running()) finish(exit_code::kInternal, false, "ddplaunch ended on an internal error");
}

std::vector<JobRecord> running_jobs() {
  std::vector<JobRecord> jobs;
  for (auto& [path, job] : read_records()) {
    if (job.running()) jobs.push_back(std::move(job));
  }
  return jobs;
}

std::vector<JobRecord> all_jobs() {
  std::vector<JobRecord> jobs;
  for (auto& [path, job] : read_records()) jobs.push_back(std::move(job));
  return jobs;
}

std::optional<JobRecord> find_job(const std::string& job_id, int pid) {
  for (auto& [path, job] : read_records()) {
    if (job.job_id == job_id && job.pid == pid) return std::move(job);
  }
  return std::nullopt;
}

std::optional<JobRecord> end_of(const JobRecord& job) {
  std::optional<JobRecord> now = find_job(job.job_id, job.pid);
  if (now && now->running()) return std::nullopt;
  if (!now) {
    now = job;
    now->state = JobState::kLost;
    now->exit_code.reset();
  }
  return now;
}

}  // namespace ddp
