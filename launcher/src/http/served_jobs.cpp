#include "http/served_jobs.h"

#include <nlohmann/json.hpp>

#include "coordinator/coordinator.h"
#include "health/rank_state.h"

namespace ddp {

JobSource coordinator_jobs(Coordinator& coordinator) {
  return [&coordinator] {
    std::vector<ServedJob> served;
    for (const std::shared_ptr<CoordinatorJob>& job : coordinator.jobs()) {
      served.push_back({job->id(), [job](const std::string& token) { return job->token_matches(token); },
                        [job] { return job->status_json(); }});
    }
    return served;
  };
}

std::string status_document(const std::string& status_json) {
  nlohmann::json status = nlohmann::json::parse(status_json, nullptr, false);
  if (status.is_discarded()) return status_json;
  add_rank_states(status);
  return status.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace ddp
