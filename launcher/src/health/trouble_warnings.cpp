#include "health/trouble_warnings.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "output/byte_size.h"

namespace ddp {

namespace {

// Fewer heartbeats than this say too little about what a rank was doing.
constexpr int kMinHistory = 3;

// Throttle reasons (metrics/nvml_gpu_reader.cpp's names) that mean heat or a
// power emergency. sw_power_cap is not one of them: see the header.
constexpr const char* kThrottleReasons[] = {"sw_thermal_slowdown", "hw_thermal_slowdown", "hw_slowdown",
                                            "hw_power_brake_slowdown"};

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

/// A step's time as people read it: "1.02 s", or "2.4 ms" below 0.1 s (the
/// others' busy time is often a few ms, which "0.00 s" would hide).
std::string step_time(double s) { return s >= 0.1 ? fmt::format("{:.2f} s", s) : fmt::format("{:.1f} ms", s * 1e3); }

uint8_t bit(TroubleKind kind) { return static_cast<uint8_t>(1u << static_cast<unsigned>(kind)); }

bool is_gpu_kind(TroubleKind kind) {
  return kind == TroubleKind::kGpuThrottled || kind == TroubleKind::kGpuXid || kind == TroubleKind::kGpuEcc ||
         kind == TroubleKind::kMemoryFull;
}

/// The median of `sorted` without one element equal to `mine` (present in
/// it): "the median of the others" in O(log n) once the figures are sorted.
std::optional<double> median_without(const std::vector<double>& sorted, double mine) {
  const size_t n = sorted.size();
  if (n < 2) return std::nullopt;
  const size_t skip = static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), mine) - sorted.begin());
  const auto at = [&](size_t k) { return sorted[k < skip ? k : k + 1]; };
  const size_t m = n - 1;
  return m % 2 == 1 ? at(m / 2) : (at(m / 2 - 1) + at(m / 2)) / 2.0;
}

/// The one thing to look at for a rank whose heartbeats mostly found it in `activity`.
std::string look_at_for(WorkerPhase activity, int rank) {
  switch (activity) {
    case WorkerPhase::kData:
      return fmt::format("the DataLoader workers of rank {} and the storage its node reads from", rank);
    case WorkerPhase::kForward:
    case WorkerPhase::kBackward:
    case WorkerPhase::kOptimizer:
      return fmt::format("rank {}'s device: its clocks, throttling, other processes using it", rank);
    case WorkerPhase::kCheckpoint:
      return fmt::format("saving on rank {}: what it writes and where", rank);
    case WorkerPhase::kCollective:
      return fmt::format("the network and rank {}'s peers: its link, the NCCL/Gloo settings, the ranks it waits for",
                         rank);
    case WorkerPhase::kOther:
    case WorkerPhase::kUnknown:
      break;
  }
  return fmt::format("work only rank {} does outside the training step (logging, evaluation, saving)", rank);
}

}  // namespace

const char* to_string(TroubleKind kind) {
  switch (kind) {
    case TroubleKind::kStraggler: return "straggler";
    case TroubleKind::kGpuUnderused: return "gpu_underused";
    case TroubleKind::kGpuThrottled: return "gpu_throttled";
    case TroubleKind::kGpuXid: return "gpu_xid";
    case TroubleKind::kGpuEcc: return "gpu_ecc";
    case TroubleKind::kMemoryFull: return "memory_full";
  }
  return "unknown";
}

std::string TroubleWarning::line() const { return summary + "; look at: " + look_at; }

TroubleWarnings::TroubleWarnings(TroubleConfig config, int world_size, const Clock& clock)
    : config_(std::move(config)), clock_(clock) {
  reset(world_size);
}

void TroubleWarnings::reset(int world_size) {
  ranks_.assign(static_cast<size_t>(std::max(world_size, 0)), RankTrack{});
  dirty_.clear();
  any_new_step_ = false;
  any_new_sample_ = false;
  recent_.clear();
  given_ = 0;
}

bool TroubleWarnings::active(int rank) const {
  return rank >= 0 && rank < static_cast<int>(ranks_.size()) && !ranks_[static_cast<size_t>(rank)].exited;
}

void TroubleWarnings::mark(int rank) {
  RankTrack& t = ranks_[static_cast<size_t>(rank)];
  if (t.queued) return;
  t.queued = true;
  dirty_.push_back(rank);
}

void TroubleWarnings::on_heartbeat(const RankReport& r, SteadyTime received) {
  if (!active(r.rank)) return;
  RankTrack& t = ranks_[static_cast<size_t>(r.rank)];
  // A heartbeat with neither a step nor a phase (the program starting, not
  // training yet) says nothing of where a step's time goes.
  const WorkerPhase activity = activity_of(r);
  const bool telling = r.step >= 0 || activity != WorkerPhase::kUnknown;
  if (telling && (!t.phase_at || received - *t.phase_at >= config_.phase_interval)) {
    t.phases.add(activity);
    t.phase_at = received;
  }
  if (r.step < 0 || r.step == t.step) return;
  t.step = r.step;
  // Busy time (the step less its waits for other ranks) where the worker
  // reports it: in lock-step training every rank's step lasts as long as the
  // slowest one's, and only the busy time tells the straggler apart.
  t.busy_measured = r.busy_seconds > 0;
  t.busy = t.busy_measured ? r.busy_seconds : r.step_seconds;
  t.sync = t.busy_measured ? std::clamp(r.sync_seconds, 0.0, t.busy) : 0;
  t.new_step = true;
  any_new_step_ = true;
  mark(r.rank);
}

void TroubleWarnings::on_resources(int rank, const RankResources& sample, SteadyTime taken) {
  if (!active(rank)) return;
  RankTrack& t = ranks_[static_cast<size_t>(rank)];
  if (t.sample_at && taken - *t.sample_at < config_.phase_interval) return;
  t.sample_at = taken;
  double util = 0;
  int with_util = 0;
  for (const GpuResources& g : sample.gpus) {
    if (g.util_percent) {
      util += *g.util_percent;
      ++with_util;
    }
    auto it = std::find_if(t.gpus.begin(), t.gpus.end(), [&](const GpuTrack& k) { return k.index == g.index; });
    if (it == t.gpus.end()) {
      it = t.gpus.insert(t.gpus.end(), GpuTrack());
      it->index = g.index;
    }
    GpuTrack& k = *it;
    k.pending = true;
    k.throttle_reasons.clear();
    for (const std::string& reason : g.throttle_reasons) {
      if (std::find(std::begin(kThrottleReasons), std::end(kThrottleReasons), reason) == std::end(kThrottleReasons)) {
        continue;
      }
      k.throttle_reasons += (k.throttle_reasons.empty() ? "" : ", ") + reason;
    }
    k.throttle_run = k.throttle_reasons.empty() ? 0 : k.throttle_run + 1;
    k.xid_errors = g.xid_errors.value_or(0);
    k.last_xid = g.last_xid.value_or(-1);
    if (g.ecc_errors) {
      if (!k.ecc_base) k.ecc_base = *g.ecc_errors;
      k.ecc_errors = *g.ecc_errors;
    }
    k.mem_used = g.mem_used_bytes.value_or(0);
    k.mem_total = g.mem_total_bytes.value_or(0);
    k.rank_mem = g.rank_mem_bytes.value_or(0);
  }
  t.gpu_util = with_util > 0 ? std::optional<double>(util / with_util) : std::nullopt;
  t.new_sample = true;
  any_new_sample_ = true;
  mark(rank);
}

void TroubleWarnings::on_rank_exited(int rank) {
  if (rank >= 0 && rank < static_cast<int>(ranks_.size())) ranks_[static_cast<size_t>(rank)].exited = true;
}

std::vector<TroubleWarning> TroubleWarnings::check(const Describe& describe) {
  std::vector<TroubleWarning> out;
  if (dirty_.empty()) return out;
  if (any_new_step_) check_stragglers(describe, out);
  if (any_new_sample_) check_gpu_use(describe, out);
  for (int rank : dirty_) {
    RankTrack& t = ranks_[static_cast<size_t>(rank)];
    if (t.new_sample && !t.exited) check_gpus(rank, describe, out);
    t.new_step = false;
    t.new_sample = false;
    t.queued = false;
  }
  dirty_.clear();
  any_new_step_ = false;
  any_new_sample_ = false;
  return out;
}

double TroubleWarnings::least_sync() const {
  double least = 0;
  for (const RankTrack& t : ranks_) {
    if (!t.exited && t.busy > 0 && t.sync > 0 && (least == 0 || t.sync < least)) least = t.sync;
  }
  return least;
}

void TroubleWarnings::check_stragglers(const Describe& describe, std::vector<TroubleWarning>& out) {
  // A sync span beyond the least one is a wait for the others, not work.
  const double work_in_sync = least_sync();
  const auto busy = [work_in_sync](const RankTrack& t) {
    return t.sync > 0 ? t.busy - t.sync + work_in_sync : t.busy;
  };
  std::vector<double>& all = sorted_;
  all.clear();
  for (const RankTrack& t : ranks_) {
    if (!t.exited && t.busy > 0) all.push_back(busy(t));
  }
  std::sort(all.begin(), all.end());
  const int needed = std::max(config_.straggler_heartbeats, 1);
  for (int rank : dirty_) {
    RankTrack& t = ranks_[static_cast<size_t>(rank)];
    if (!t.new_step || t.exited || t.busy <= 0) continue;
    const double mine = busy(t);
    const std::optional<double> median = median_without(all, mine);
    if (!median) continue;
    const bool slow = mine > config_.straggler_factor * *median;
    t.slow_steps = slow ? t.slow_steps + 1 : 0;
    if (!slow) t.slow_from = t.phases.added();
    if (t.slow_steps < needed || (t.warned & bit(TroubleKind::kStraggler)) != 0) continue;
    TroubleWarning w;
    w.kind = TroubleKind::kStraggler;
    w.rank = rank;
    w.value = mine;
    w.others = *median;
    const auto [story, look_at] = phase_story(rank, static_cast<int>(std::min<uint64_t>(
                                                        t.phases.added() - t.slow_from, PhaseHistory::kCapacity)));
    w.summary = fmt::format("{} is a straggler: {} {} per step, the others {} (median), above {:g}x for "
                            "{} consecutive steps{}",
                            describe(rank), t.busy_measured ? "busy" : "steps of", step_time(mine), step_time(*median),
                            config_.straggler_factor, t.slow_steps, story);
    w.look_at = look_at;
    give(std::move(w), out);
  }
}

void TroubleWarnings::check_gpu_use(const Describe& describe, std::vector<TroubleWarning>& out) {
  std::vector<double>& all = sorted_;
  all.clear();
  for (const RankTrack& t : ranks_) {
    if (!t.exited && t.gpu_util) all.push_back(*t.gpu_util);
  }
  std::sort(all.begin(), all.end());
  const int needed = std::max(config_.gpu_low_samples, 1);
  for (int rank : dirty_) {
    RankTrack& t = ranks_[static_cast<size_t>(rank)];
    if (!t.new_sample || t.exited || !t.gpu_util) continue;  // a rank without GPU samples is never compared
    const std::optional<double> median = median_without(all, *t.gpu_util);
    if (!median) continue;
    const double mine = *t.gpu_util;
    const bool low = mine < config_.gpu_low_fraction * *median && *median - mine >= config_.gpu_low_gap;
    t.low_samples = low ? t.low_samples + 1 : 0;
    if (t.low_samples < needed || (t.warned & bit(TroubleKind::kGpuUnderused)) != 0) continue;
    TroubleWarning w;
    w.kind = TroubleKind::kGpuUnderused;
    w.rank = rank;
    w.value = mine;
    w.others = *median;
    const auto [story, look_at] = phase_story(rank);
    w.summary = fmt::format("{} keeps its GPU far less busy than the others: {:.0f}% against {:.0f}% (median) in {} "
                            "consecutive samples{}",
                            describe(rank), mine, *median, t.low_samples, story);
    w.look_at = look_at;
    give(std::move(w), out);
  }
}

void TroubleWarnings::check_gpus(int rank, const Describe& describe, std::vector<TroubleWarning>& out) {
  RankTrack& t = ranks_[static_cast<size_t>(rank)];
  for (GpuTrack& k : t.gpus) {
    if (!k.pending) continue;
    k.pending = false;
    const auto warn = [&](TroubleKind kind, std::string summary, std::string look_at) {
      if ((k.warned & bit(kind)) != 0) return;
      k.warned |= bit(kind);
      TroubleWarning w;
      w.kind = kind;
      w.rank = rank;
      w.gpu = k.index;
      w.summary = std::move(summary);
      w.look_at = std::move(look_at);
      give(std::move(w), out);
    };
    if (k.throttle_run >= std::max(config_.throttle_samples, 1)) {
      warn(TroubleKind::kGpuThrottled,
           fmt::format("{}: GPU {} is throttled ({}) in {} consecutive samples", describe(rank), k.index,
                       k.throttle_reasons, k.throttle_run),
           fmt::format("cooling and power of GPU {} on rank {}'s node: fans, airflow, power supply", k.index, rank));
    }
    if (k.xid_errors > 0) {
      warn(TroubleKind::kGpuXid,
           fmt::format("{}: GPU {} reported {} critical Xid error(s){}", describe(rank), k.index, k.xid_errors,
                       k.last_xid >= 0 ? fmt::format(", the last Xid {}", k.last_xid) : std::string()),
           fmt::format("GPU {} on rank {}'s node: the kernel log's Xid lines; it may need a reset or draining",
                       k.index, rank));
    }
    if (k.ecc_base && k.ecc_errors > *k.ecc_base) {
      warn(TroubleKind::kGpuEcc,
           fmt::format("{}: GPU {} has {} new uncorrected ECC error(s) in this generation ({} since its driver "
                       "loaded)",
                       describe(rank), k.index, k.ecc_errors - *k.ecc_base, k.ecc_errors),
           fmt::format("the memory of GPU {} on rank {}'s node: drain the node if the count keeps rising", k.index,
                       rank));
    }
    if (k.mem_total > 0 && static_cast<double>(k.mem_used) >= config_.memory_full * static_cast<double>(k.mem_total)) {
      const double gib = static_cast<double>(1ull << 30);
      warn(TroubleKind::kMemoryFull,
           fmt::format("{}: GPU {} memory is close to full: {:.1f} of {:.1f} GiB in use{}", describe(rank), k.index,
                       static_cast<double>(k.mem_used) / gib, static_cast<double>(k.mem_total) / gib,
                       k.rank_mem > 0 ? fmt::format(" ({} held by this rank)", format_bytes(static_cast<int64_t>(k.rank_mem)))
                                      : std::string()),
           fmt::format("rank {}'s memory use: batch size, activations kept for backward, other processes on GPU {}",
                       rank, k.index));
    }
  }
}

std::pair<std::string, std::string> TroubleWarnings::phase_story(int rank, int beats) const {
  const PhaseHistory mine = ranks_[static_cast<size_t>(rank)].phases.last(beats);
  if (mine.size() < kMinHistory) return {"", look_at_for(WorkerPhase::kUnknown, rank)};
  const WorkerPhase dominant = mine.dominant();
  const double share = 100.0 * mine.count(dominant) / mine.size();
  std::string story = dominant == WorkerPhase::kCollective
                          ? fmt::format("; its heartbeats found it waiting in a collective {:.0f}% of the time", share)
                          : fmt::format("; its heartbeats found it in phase {} {:.0f}% of the time", to_string(dominant),
                                        share);
  // What the others did meanwhile: waiting for it in a collective, if it is the cause.
  int64_t seen = 0;
  int64_t waiting = 0;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (static_cast<int>(i) == rank || ranks_[i].exited) continue;
    const PhaseHistory theirs = ranks_[i].phases.last(beats);
    seen += theirs.size();
    waiting += theirs.count(WorkerPhase::kCollective);
  }
  if (seen > 0) {
    story += fmt::format(", the others waited in a collective {:.0f}% of theirs",
                         100.0 * static_cast<double>(waiting) / static_cast<double>(seen));
  }
  return {story, look_at_for(dominant, rank)};
}

void TroubleWarnings::give(TroubleWarning w, std::vector<TroubleWarning>& out) {
  RankTrack& t = ranks_[static_cast<size_t>(w.rank)];
  if (!is_gpu_kind(w.kind)) t.warned |= bit(w.kind);
  w.at = clock_.now();
  ++given_;
  recent_.push_back(w);
  while (recent_.size() > kListed) recent_.pop_front();
  out.push_back(std::move(w));
}

nlohmann::json warnings_json(const std::vector<TroubleWarning>& warnings, SteadyTime now) {
  nlohmann::json list = nlohmann::json::array();
  for (const TroubleWarning& w : warnings) {
    nlohmann::json j = {{"kind", to_string(w.kind)},
                        {"rank", w.rank},
                        {"summary", w.summary},
                        {"look_at", w.look_at},
                        {"age_s", seconds(now - w.at)}};
    if (w.gpu >= 0) j["gpu"] = w.gpu;
    list.push_back(std::move(j));
  }
  return list;
}

nlohmann::json given_json(const std::vector<GivenWarning>& given) {
  nlohmann::json list = nlohmann::json::array();
  for (const GivenWarning& g : given) {
    nlohmann::json j = {{"kind", to_string(g.kind)}};
    if (g.gpu >= 0) j["gpu"] = g.gpu;
    list.push_back(std::move(j));
  }
  return list;
}

nlohmann::json TroubleWarnings::recent_json() const { return warnings_json(recent(), clock_.now()); }

std::vector<GivenWarning> TroubleWarnings::given_to(int rank) const {
  std::vector<GivenWarning> given;
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return given;
  const RankTrack& t = ranks_[static_cast<size_t>(rank)];
  for (int k = 0; k < kTroubleKinds; ++k) {
    const auto kind = static_cast<TroubleKind>(k);
    if (!is_gpu_kind(kind) && (t.warned & bit(kind)) != 0) given.push_back({kind, -1});
  }
  for (const GpuTrack& g : t.gpus) {
    for (int k = 0; k < kTroubleKinds; ++k) {
      const auto kind = static_cast<TroubleKind>(k);
      if (is_gpu_kind(kind) && (g.warned & bit(kind)) != 0) given.push_back({kind, g.index});
    }
  }
  return given;
}

}  // namespace ddp
