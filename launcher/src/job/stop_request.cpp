#include "job/stop_request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

namespace ddp {

std::string stop_request_json(const StopRequest& request) {
  nlohmann::json j = {{"stop_at_step", nullptr}, {"reason", request.reason},
                      {"requested_at", format_iso8601(request.requested_at)}};
  if (request.stop_at_step) j["stop_at_step"] = *request.stop_at_step;
  return j.dump() + "\n";
}

void write_stop_request(const std::filesystem::path& path, const StopRequest& request) {
  // The pid in the temp name: the agents of a job whose nodes share the log
  // folder (a Slurm job's shared storage) write this file at the same time.
  const std::filesystem::path temporary = fmt::format("{}.tmp.{}", path.string(), getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << stop_request_json(request);
    if (!out.flush()) throw std::runtime_error(fmt::format("cannot write {}", temporary.string()));
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) throw std::runtime_error(fmt::format("cannot rename {} to {}: {}", temporary.string(), path.string(), ec.message()));
}

}  // namespace ddp
