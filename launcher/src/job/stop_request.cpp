#include "job/stop_request.h"

#include "ddp/common/replace_file.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace ddp {

std::string stop_request_json(const StopRequest& request) {
  nlohmann::json j = {{"stop_at_step", nullptr}, {"reason", request.reason},
                      {"requested_at", format_iso8601(request.requested_at)}};
  if (request.stop_at_step) j["stop_at_step"] = *request.stop_at_step;
  return j.dump() + "\n";
}

void write_stop_request(const std::filesystem::path& path, const StopRequest& request) {
  // Whole: the agents of a job whose nodes share the log folder (a Slurm
  // job's shared storage) write this file at the same time.
  std::error_code ec;
  if (!replace_file(path, stop_request_json(request), ec)) {
    throw std::runtime_error(fmt::format("cannot write {}: {}", path.string(), ec.message()));
  }
}

}  // namespace ddp
