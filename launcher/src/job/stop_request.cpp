#include "job/stop_request.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

namespace ddp {

std::optional<int64_t> choose_stop_step(const std::vector<ForwardedReport>& reports, Duration heartbeat_interval) {
  std::optional<int64_t> most;
  double fastest = 0;  // seconds; 0: no step time known
  for (const ForwardedReport& f : reports) {
    const RankReport& r = f.report;
    if (r.step < 0) continue;
    // The runtime reports the step it began; the companion the steps it completed.
    most = std::max(most.value_or(0), r.step + 1);
    if (r.step_seconds > 0 && (fastest == 0 || r.step_seconds < fastest)) fastest = r.step_seconds;
  }
  if (!most) return std::nullopt;
  const double lag_s = 2 * std::chrono::duration<double>(heartbeat_interval).count();
  const double ahead = fastest > 0 ? std::ceil(lag_s / fastest) : 2;
  return *most + static_cast<int64_t>(std::min(ahead, 1e9)) + 1;
}

std::string stop_request_json(const StopRequest& request) {
  nlohmann::json j = {{"stop_at_step", nullptr}, {"reason", request.reason},
                      {"requested_at", format_iso8601(request.requested_at)}};
  if (request.stop_at_step) j["stop_at_step"] = *request.stop_at_step;
  return j.dump() + "\n";
}

void write_stop_request(const std::filesystem::path& path, const StopRequest& request) {
  const std::filesystem::path temporary = path.string() + ".tmp";
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
