#include "metrics/resource_history.h"

#include <fmt/format.h>

#include <chrono>

namespace ddp {
namespace {

using namespace std::chrono_literals;

constexpr Duration kIdleAtLeast = 10s;  // shorter idle spells are normal (a data load, a checkpoint)
constexpr double kIdlePercent = 1.0;
constexpr double kMemoryClose = 0.95;

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string gib(uint64_t bytes) { return fmt::format("{:.1f}", static_cast<double>(bytes) / (1ull << 30)); }

}  // namespace

void ResourceHistory::add(SteadyTime at, const RankResources& r) {
  if (last_at_ && at <= *last_at_) return;
  last_at_ = at;
  std::map<int, SteadyTime> idle;
  for (const GpuResources& g : r.gpus) {
    if (!g.util_percent || *g.util_percent > kIdlePercent) continue;
    const auto was = gpu_idle_since_.find(g.index);
    idle[g.index] = was != gpu_idle_since_.end() ? was->second : at;  // a GPU missing from a sample ends its spell
  }
  gpu_idle_since_ = std::move(idle);
}

std::vector<std::string> ResourceHistory::notes(int rank, const RankResources& latest, SteadyTime now,
                                                const std::string& before) const {
  std::vector<std::string> out;
  for (const GpuResources& g : latest.gpus) {
    const auto idle = gpu_idle_since_.find(g.index);
    if (idle != gpu_idle_since_.end() && now - idle->second >= kIdleAtLeast) {
      out.push_back(fmt::format("rank {}'s GPU {} was at {:.0f}% for the {:.0f} s {}", rank, g.index,
                                g.util_percent.value_or(0), seconds(now - idle->second), before));
    }
    if (g.mem_used_bytes && g.mem_total_bytes && *g.mem_total_bytes > 0 &&
        static_cast<double>(*g.mem_used_bytes) >= kMemoryClose * static_cast<double>(*g.mem_total_bytes)) {
      out.push_back(fmt::format("rank {}'s GPU {} was OOM-close: {} of {} GiB", rank, g.index,
                                gib(*g.mem_used_bytes), gib(*g.mem_total_bytes)));
    }
  }
  return out;
}

}  // namespace ddp
