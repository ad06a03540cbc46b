#include "agent/worker_health_board.h"

namespace ddp {

void WorkerHealthBoard::record(RankReport report) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int rank = report.rank;
  latest_[rank] = {std::move(report), clock_.now()};
}

std::vector<ForwardedReport> WorkerHealthBoard::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const SteadyTime now = clock_.now();
  std::vector<ForwardedReport> out;
  out.reserve(latest_.size());
  for (const auto& [rank, entry] : latest_) out.push_back({entry.first, now - entry.second});
  return out;
}

void WorkerHealthBoard::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  latest_.clear();
  dump_requests_.clear();
}

void WorkerHealthBoard::request_stack_dumps(const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  dump_requests_.insert(ranks.begin(), ranks.end());
}

bool WorkerHealthBoard::take_stack_dump_request(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  return dump_requests_.erase(rank) > 0;
}

}  // namespace ddp
