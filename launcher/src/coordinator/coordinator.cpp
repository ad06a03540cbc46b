#include "coordinator/coordinator.h"

#include <fmt/format.h>

#include <stdexcept>

namespace ddp {

Coordinator::Coordinator(const Clock& clock, UniqueIdSource& ids, CoordinatorOptions options)
    : clock_(clock), ids_(ids), options_(options) {}

void Coordinator::create_job(const std::string& job_id, const std::string& token, const JobConfig& config,
                             const std::optional<Takeover>& takeover) {
  JobConfig c = config;
  c.node_timeout = options_.node_timeout;
  std::lock_guard<std::mutex> lock(mutex_);
  if (jobs_.count(job_id) != 0) throw std::logic_error(fmt::format("job '{}' exists already", job_id));
  jobs_[job_id] = {std::make_shared<CoordinatorJob>(job_id, token, c, clock_, ids_, takeover), std::nullopt};
}

Status Coordinator::find(const std::string& job_id, const std::string& token, std::shared_ptr<CoordinatorJob>& job,
                         int epoch) {
  std::shared_ptr<CoordinatorJob> found;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return {StatusCode::kNotFound, fmt::format("unknown job '{}'", job_id)};
    if (!it->second.job->token_matches(token)) {
      return {StatusCode::kUnauthenticated, fmt::format("wrong token for job '{}'", job_id)};
    }
    found = it->second.job;
  }
  // Outside the registry's lock: fencing a job runs its callbacks.
  if (Status s = found->check_epoch(epoch); !s.ok()) return s;
  job = std::move(found);
  return Status::Ok();
}

Status Coordinator::find_for_join(const std::string& job_id, const std::string& token, const JobConfig& joiner_view,
                                  std::shared_ptr<CoordinatorJob>& job, int epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (jobs_.count(job_id) == 0) {
      if (job_id.empty() || job_id.size() > CoordinatorLimits::kMaxIdBytes) {
        return {StatusCode::kInvalidArgument, "a job id must have 1 to 256 bytes"};
      }
      if (token.empty()) return {StatusCode::kUnauthenticated, fmt::format("job '{}' needs a token", job_id)};
      JobConfig c = joiner_view;
      c.node_timeout = options_.node_timeout;
      jobs_[job_id] = {std::make_shared<CoordinatorJob>(job_id, token, c, clock_, ids_), std::nullopt};
    }
  }
  return find(job_id, token, job, epoch);
}

void Coordinator::tick() {
  std::vector<std::shared_ptr<CoordinatorJob>> jobs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const SteadyTime now = clock_.now();
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      Entry& e = it->second;
      if (e.finished_at && now - *e.finished_at > options_.finished_job_retention) {
        it = jobs_.erase(it);
        continue;
      }
      jobs.push_back(e.job);
      ++it;
    }
  }
  // Outside the registry lock: a job's tick runs callbacks.
  for (auto& job : jobs) job->tick();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [id, e] : jobs_) {
    if (!e.finished_at && e.job->finished()) e.finished_at = clock_.now();
  }
}

void Coordinator::abort_all() {
  std::vector<std::shared_ptr<CoordinatorJob>> jobs;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [id, e] : jobs_) jobs.push_back(e.job);
  }
  for (auto& job : jobs) job->abort_all({StatusCode::kUnavailable, "the coordinator is shutting down"});
}

std::vector<std::shared_ptr<CoordinatorJob>> Coordinator::jobs() const {
  std::vector<std::shared_ptr<CoordinatorJob>> all;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [id, e] : jobs_) all.push_back(e.job);
  return all;
}

size_t Coordinator::job_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return jobs_.size();
}

}  // namespace ddp
