#include "health/hang_detector.h"

#include <algorithm>
#include <utility>

#include <fmt/format.h>

#include "health/health_view.h"
#include "health/peer_waits.h"
#include "health/rank_list.h"
#include "health/subgroup_waits.h"
#include "output/byte_size.h"

namespace ddp {

namespace {

// How many ranks a summary describes in full before "and N more".
constexpr size_t kDescribedRanks = 3;
// How many point-to-point waits a summary lists before "and N more".
constexpr size_t kDescribedWaits = 4;

double seconds(Duration d) { return std::chrono::duration<double>(d).count(); }

std::string format_seconds(Duration d) {
  const double s = seconds(d);
  return s >= 100 ? fmt::format("{:.0f} s", s) : fmt::format("{:.1f} s", s);
}

/// "all_reduce #57 (4.0 MiB float32)".
std::string collective_label(uint64_t sequence, const CollectiveSeen* c) {
  std::string out = fmt::format("{} #{}", c && !c->op.empty() ? c->op : "collective", sequence);
  if (c) {
    std::string what;
    if (c->bytes > 0) what = format_bytes(c->bytes);
    if (!c->dtype.empty()) what += (what.empty() ? "" : " ") + c->dtype;
    if (!what.empty()) out += " (" + what + ")";
  }
  return out;
}

std::vector<int> difference(const std::vector<int>& all, const std::vector<int>& minus) {
  std::vector<int> out;
  for (int r : all) {
    if (std::find(minus.begin(), minus.end(), r) == minus.end()) out.push_back(r);
  }
  return out;
}

HangConfig with_phase_interval(HangConfig c) {
  c.trouble.phase_interval = c.heartbeat_interval / 2;
  return c;
}

/// Half a core: a process above it computes (torch.save checksums a tensor
/// before it writes it, seconds for a big one); one blocked on storage sits
/// near 0.
constexpr double kBusyCpuPercent = 50;

/// Whether the process wrote between two samples of it: either count grew
/// (rank_resources.h; each misses some writes the other sees).
bool wrote_since(const RankResources& before, const RankResources& after) {
  const auto grew = [](const std::optional<uint64_t>& a, const std::optional<uint64_t>& b) {
    return a && b && *b > *a;
  };
  return grew(before.written_bytes, after.written_bytes) || grew(before.dirtied_bytes, after.dirtied_bytes);
}
}  // namespace

HangDetector::HangDetector(HangConfig config, int world_size, const Clock& clock)
    : config_(with_phase_interval(std::move(config))),
      clock_(clock),
      desync_(world_size),
      trouble_(config_.trouble, world_size, clock) {
  reset(world_size);
}

void HangDetector::reset(int world_size) {
  ranks_.assign(static_cast<size_t>(std::max(world_size, 0)), RankState{});
  last_progress_ = clock_.now();
  fastest_step_seconds_ = 0;
  desync_.reset(world_size);
  verdict_.reset();
  trouble_.reset(world_size);
}

void HangDetector::on_report(RankReport report, Duration age) {
  if (report.rank < 0 || report.rank >= world_size()) return;
  RankState& st = ranks_[static_cast<size_t>(report.rank)];
  if (report.resources) {
    // Samples have their own age (the agent samples every rank, heartbeat or
    // not), and the last one of an exited rank is worth keeping.
    const SteadyTime taken = clock_.now() - std::max(report.resources->age, Duration::zero());
    if (!st.resources || taken >= st.resources_at) {
      const RankResources& now_seen = *report.resources;
      if ((st.resources && st.resources->pid == now_seen.pid && wrote_since(*st.resources, now_seen)) ||
          now_seen.cpu_percent.value_or(0) >= kBusyCpuPercent) {
        st.saving_at = taken;
      }
      st.resources = std::make_shared<const RankResources>(std::move(*report.resources));
      st.resources_at = taken;
      st.history.add(taken, *st.resources);
      trouble_.on_resources(report.rank, *st.resources, taken);
    }
    report.resources.reset();  // kept apart, in st.resources
  }
  if (report.resources_only) return;
  if (st.exited) return;
  const SteadyTime received = clock_.now() - std::max(age, Duration::zero());
  if (st.monitored && received < st.received_at) {
    // An older report arriving late (transit times differ): what it shows
    // the rank issued still counts.
    desync_.record(report, clock_.now());
    return;
  }

  const bool first = !st.monitored;
  const bool progressed = first || report.step != st.report->step ||
                          report.last_completed != st.report->last_completed ||
                          subgroup_completed(report) != subgroup_completed(*st.report) ||
                          report.peer_calls_done != st.report->peer_calls_done;
  if (!first && report.activity != st.report->activity) st.active_at = received;
  if (report.step_seconds > 0 && (fastest_step_seconds_ == 0 || report.step_seconds < fastest_step_seconds_)) {
    fastest_step_seconds_ = report.step_seconds;
  }
  st.monitored = true;
  st.report = std::make_shared<const RankReport>(std::move(report));
  st.received_at = received;
  if (progressed) last_progress_ = std::max(last_progress_, received);
  desync_.record(*st.report, clock_.now());
  trouble_.on_heartbeat(*st.report, received);
}

void HangDetector::on_rank_exited(int rank) {
  if (rank < 0 || rank >= world_size()) return;
  ranks_[static_cast<size_t>(rank)].exited = true;
  trouble_.on_rank_exited(rank);
}

std::vector<TroubleWarning> HangDetector::take_warnings() {
  return trouble_.check([this](int rank) { return who(rank); });
}

bool HangDetector::any_monitored() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const RankState& s) { return s.monitored; });
}

std::vector<RankReport> HangDetector::latest_reports() const {
  std::vector<RankReport> reports;
  for (const RankState& s : ranks_) {
    if (s.monitored) reports.push_back(*s.report);
  }
  return reports;
}

std::optional<HangVerdict> HangDetector::check() { return decide(2 * config_.heartbeat_interval); }

std::optional<HangVerdict> HangDetector::check_at_once() { return decide(Duration::zero()); }

std::optional<HangVerdict> HangDetector::decide(Duration desync_wait) {
  if (verdict_) return std::nullopt;
  std::optional<HangVerdict> v = evaluate(clock_.now(), desync_wait);
  if (v) verdict_ = v;
  return v;
}

std::optional<HangVerdict> HangDetector::evaluate(SteadyTime now, Duration desync_wait) const {
  std::optional<HangVerdict> v;
  if (desync_.found()) {
    // Nothing else is judged while the ranks yet to report its collective
    // are waited for: the desync is the cause of what follows.
    v = desync_verdict(now, desync_wait);
  } else {
    v = silent_verdict(now);
    if (!v) v = stuck_verdict(now);
  }
  if (v) v->details = details(*v, now);
  return v;
}

std::optional<HangVerdict> HangDetector::desync_verdict(SteadyTime now, Duration wait) const {
  std::vector<DesyncRank> ranks(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].monitored) ranks[i] = DesyncRank{ranks_[i].report.get(), !ranks_[i].exited};
  }
  return desync_.verdict(ranks, now, wait);
}

HangDetector::OpenCollective HangDetector::find_open(const std::vector<int>& candidates,
                                                     SteadyTime now) const {
  OpenCollective out;
  for (int r : candidates) {
    const std::vector<CollectiveSeen> open = open_collectives(*ranks_[static_cast<size_t>(r)].report);
    if (!open.empty() && (out.sequence == 0 || open.front().sequence < out.sequence)) {
      out.sequence = open.front().sequence;
    }
  }
  if (out.sequence == 0) return out;
  for (int r : candidates) {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    for (const CollectiveSeen& c : open_collectives(*st.report)) {
      if (c.sequence != out.sequence) continue;
      out.waiting.push_back(r);
      out.waited = std::max(out.waited, c.age + (now - st.received_at));
      if (!out.info || (out.info->op.empty() && !c.op.empty())) out.info = c;
    }
  }
  return out;
}

std::optional<HangVerdict> HangDetector::silent_verdict(SteadyTime now) const {
  // Called ten times a second: the usual answer (no rank silent) costs one
  // pass and no allocation.
  std::vector<int> silent;
  Duration longest{};
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const RankState& st = ranks_[i];
    if (!st.monitored || st.exited) continue;
    const Duration quiet = now - st.received_at;
    if (quiet > config_.hang_timeout && !saving(static_cast<int>(i), now)) {
      silent.push_back(static_cast<int>(i));
      longest = std::max(longest, quiet);
    }
  }
  if (silent.empty()) return std::nullopt;
  std::vector<int> others;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const RankState& st = ranks_[i];
    if (st.monitored && !st.exited && now - st.received_at <= config_.hang_timeout) others.push_back(static_cast<int>(i));
  }

  HangVerdict v;
  v.kind = HangKind::kSilentRank;
  v.culprits = silent;
  // What the others do: the smallest collective they wait in, if any.
  const OpenCollective open = find_open(others, now);
  std::string tail;
  if (open.sequence != 0) {
    v.sequence = open.sequence;
    v.waiting = open.waiting;
    if (open.info) v.op = open.info->op;
    tail = fmt::format("; {} {} waited in {} for {}", rank_word(open.waiting),
                       open.waiting.size() == 1 ? "has" : "have",
                       collective_label(open.sequence, open.info ? &*open.info : nullptr),
                       format_seconds(open.waited));
  }
  std::string who;
  if (silent.size() == 1) {
    who = describe(silent.front()) + " sent no heartbeat for " + format_seconds(longest);
  } else {
    who = fmt::format("{} sent no heartbeat for up to {}: ", rank_word(silent), format_seconds(longest));
    for (size_t i = 0; i < silent.size() && i < kDescribedRanks; ++i) {
      who += (i ? ", " : "") + describe(silent[i]);
    }
    if (silent.size() > kDescribedRanks) who += fmt::format(" and {} more", silent.size() - kDescribedRanks);
  }
  v.summary = fmt::format("{} (hang timeout {}){}", who, format_seconds(config_.hang_timeout), tail);
  return v;
}

std::optional<HangVerdict> HangDetector::stuck_verdict(SteadyTime now) const {
  // Called ten times a second: while some rank makes progress, nothing to look at.
  const Duration idle = now - last_progress_;
  if (idle <= config_.hang_timeout) return std::nullopt;
  const auto reports_progress = [](const RankState& st) {
    if (!st.monitored || st.exited) return false;
    const RankReport& r = *st.report;
    return r.step >= 0 || r.last_enqueued > 0 || !r.recent.empty() || r.peer_calls_done > 0 || !r.peer_waits.empty();
  };
  // Programs that report neither steps nor collectives nor sends and
  // receives are never called stuck.
  if (std::none_of(ranks_.begin(), ranks_.end(), reports_progress)) return std::nullopt;
  std::vector<int> active;       // monitored, still running
  std::vector<int> monitored;    // including exited
  std::vector<int> unmonitored;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const RankState& st = ranks_[i];
    if (!st.monitored) {
      unmonitored.push_back(static_cast<int>(i));
      continue;
    }
    monitored.push_back(static_cast<int>(i));
    if (st.exited) continue;
    active.push_back(static_cast<int>(i));
  }

  HangVerdict v;
  v.kind = HangKind::kStuckCollective;
  const OpenCollective open = find_open(active, now);
  const auto is_working = [this, now](int r) { return working(r, now); };
  if (open.sequence == 0) {
    if (auto sub = subgroup_verdict(active, now, nullptr)) {
      if (sub->culprits.empty()) return std::nullopt;
      return sub;
    }
    // Every rank outside the default group's collectives, and one still going
    // through its phases: a long loop without steps or collectives (an
    // evaluation pass), not a hang.
    if (std::any_of(active.begin(), active.end(), is_working)) return std::nullopt;
    if (auto peers = peer_verdict(active, now, idle)) return peers;
    std::string ranks;
    for (size_t i = 0; i < active.size() && i < 8; ++i) {
      const RankReport& r = *ranks_[static_cast<size_t>(active[i])].report;
      ranks += fmt::format("{}rank {} step {} phase {}", i ? ", " : "", r.rank, r.step, to_string(r.phase));
    }
    if (active.size() > 8) ranks += fmt::format(" and {} more", active.size() - 8);
    v.summary = fmt::format("no progress for {} (hang timeout {}); no rank in a collective: {}",
                            format_seconds(idle), format_seconds(config_.hang_timeout), ranks);
    return v;
  }

  const uint64_t k = open.sequence;
  v.sequence = k;
  v.waiting = open.waiting;
  if (open.info) v.op = open.info->op;
  for (int r : monitored) {
    const RankState& st = ranks_[static_cast<size_t>(r)];
    if (st.report->last_enqueued < k &&
        std::find(v.waiting.begin(), v.waiting.end(), r) == v.waiting.end()) {
      v.culprits.push_back(r);
    }
  }
  // A rank missing from it that still goes through its phases is on its way
  // (a longer evaluation shard than the others'): blamed once it stops.
  const size_t missing = v.culprits.size();
  v.culprits.erase(std::remove_if(v.culprits.begin(), v.culprits.end(), is_working), v.culprits.end());
  if (missing > 0 && v.culprits.empty()) return std::nullopt;
  const std::string label = collective_label(k, open.info ? &*open.info : nullptr);
  const std::string waited = format_seconds(open.waited);
  if (!v.culprits.empty()) {
    // A rank missing from the default group's collective may itself wait in
    // a subgroup's, for a member that never entered that one.
    const std::string then = fmt::format("; meanwhile {} {} waited in {} for {}", rank_word(v.waiting),
                                         v.waiting.size() == 1 ? "has" : "have", label, waited);
    if (auto sub = subgroup_verdict(v.culprits, now, &then)) {
      if (sub->culprits.empty()) return std::nullopt;
      return sub;
    }
    std::string who;
    for (size_t i = 0; i < v.culprits.size() && i < kDescribedRanks; ++i) {
      who += (i ? ", " : "") + describe(v.culprits[i]);
    }
    if (v.culprits.size() > kDescribedRanks) {
      who += fmt::format(" and {} more ({})", v.culprits.size() - kDescribedRanks,
                         format_ranks(std::vector<int>(v.culprits.begin() + kDescribedRanks, v.culprits.end())));
    }
    v.summary = fmt::format("{} never entered {} that {} {} waited in for {}", who, label,
                            rank_word(v.waiting), v.waiting.size() == 1 ? "has" : "have", waited);
  } else {
    const std::vector<int> rest = difference(active, v.waiting);
    if (rest.empty()) {
      v.summary = fmt::format("all {}ranks ({}) have waited in {} for {} and none is missing from it: "
                              "suspect the transport (network, NCCL/Gloo), not a rank",
                              unmonitored.empty() ? "" : "monitored ", format_ranks(v.waiting), label, waited);
    } else {
      v.summary = fmt::format("{} {} waited in {} for {}; {} passed it; no rank is missing from it: "
                              "suspect the transport (network, NCCL/Gloo)",
                              rank_word(v.waiting), v.waiting.size() == 1 ? "has" : "have", label, waited,
                              rank_word(rest));
    }
    if (!unmonitored.empty()) {
      v.summary += fmt::format("; {} send no heartbeats (supervised by process state only)",
                               rank_word(unmonitored));
    }
  }
  return v;
}

std::optional<HangVerdict> HangDetector::peer_verdict(const std::vector<int>& active, SteadyTime now,
                                                      Duration idle) const {
  std::vector<const RankReport*> reports(ranks_.size(), nullptr);
  for (size_t i = 0; i < ranks_.size(); ++i) {
    if (ranks_[i].monitored) reports[i] = ranks_[i].report.get();
  }
  const std::optional<PeerBlock> block = find_peer_block(reports, active);
  if (!block) return std::nullopt;
  HangVerdict v;
  v.kind = HangKind::kStuckCollective;
  v.culprits = block->culprits;
  v.waiting = block->waiting;
  v.op = block->edges.front().wait.op;
  // "rank 2 in recv (1.0 KiB) from rank 1 for 3.2 s, ...": the waits of the
  // ranks `of` picks, at most kDescribedWaits of them.
  const auto list_waits = [&](const std::vector<int>& of) {
    std::string out;
    size_t shown = 0, left = 0;
    for (const PeerEdge& e : block->edges) {
      if (std::find(of.begin(), of.end(), e.rank) == of.end()) continue;
      if (shown == kDescribedWaits) {
        ++left;
        continue;
      }
      const Duration age = e.wait.age + (now - ranks_[static_cast<size_t>(e.rank)].received_at);
      out += fmt::format("{}rank {} in {} for {}", shown++ ? ", " : "", e.rank, describe_peer_wait(e.wait),
                         format_seconds(age));
    }
    return left ? out + fmt::format(" and {} more", left) : out;
  };
  const std::string head =
      fmt::format("no progress for {} (hang timeout {})", format_seconds(idle), format_seconds(config_.hang_timeout));
  if (block->cycle) {
    v.summary = fmt::format("{}: {} wait for one another in sends and receives that never pair up: {}", head,
                            rank_word(v.culprits), list_waits(v.culprits));
    if (!v.waiting.empty()) {
      v.summary += fmt::format("; {} {} for them: {}", rank_word(v.waiting), v.waiting.size() == 1 ? "waits" : "wait",
                               list_waits(v.waiting));
    }
    return v;
  }
  std::string who;
  for (size_t i = 0; i < v.culprits.size() && i < kDescribedRanks; ++i) who += (i ? ", " : "") + describe(v.culprits[i]);
  if (v.culprits.size() > kDescribedRanks) who += fmt::format(" and {} more", v.culprits.size() - kDescribedRanks);
  const bool one = v.culprits.size() == 1;
  v.summary = fmt::format("{}: {} {} in no send or receive while {} {} for {}: {}", head, who, one ? "is" : "are",
                          rank_word(v.waiting), v.waiting.size() == 1 ? "waits" : "wait", one ? "it" : "them",
                          list_waits(v.waiting));
  return v;
}

bool HangDetector::working(int rank, SteadyTime now) const {
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  if (st.exited) return false;
  return (st.active_at != SteadyTime{} && now - st.active_at <= config_.hang_timeout) || saving(rank, now);
}

bool HangDetector::saving(int rank, SteadyTime now) const {
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  return !st.exited && st.monitored && st.report->phase == WorkerPhase::kCheckpoint &&
         st.saving_at != SteadyTime{} && now - st.saving_at <= config_.hang_timeout;
}

std::optional<HangVerdict> HangDetector::subgroup_verdict(const std::vector<int>& among, SteadyTime now,
                                                          const std::string* then) const {
  std::vector<SubgroupMember> members(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    const RankState& st = ranks_[i];
    if (!st.monitored) continue;
    members[i] = SubgroupMember{st.report.get(), now - st.received_at};
  }
  const std::optional<SubgroupWait> w = find_subgroup_wait(members, among);
  if (!w) return std::nullopt;
  HangVerdict v;
  v.kind = HangKind::kStuckCollective;
  v.sequence = w->collective.sequence;
  v.op = w->collective.op;
  // A member missing from it that still goes through its phases is on its
  // way, as in the default group (working()).
  for (int r : w->missing) {
    if (!working(r, now)) v.culprits.push_back(r);
  }
  if (v.culprits.empty()) return v;
  v.waiting = w->waiting;
  v.group = w->group;
  v.group_ranks = w->group_ranks;
  std::string who;
  for (size_t i = 0; i < v.culprits.size() && i < kDescribedRanks; ++i) who += (i ? ", " : "") + describe(v.culprits[i]);
  if (v.culprits.size() > kDescribedRanks) who += fmt::format(" and {} more", v.culprits.size() - kDescribedRanks);
  v.summary = fmt::format("{} never entered {} of group {} (ranks {}) that {} {} waited in for {}{}", who,
                          collective_label(v.sequence, &w->collective), w->group, format_ranks(w->group_ranks),
                          rank_word(v.waiting), v.waiting.size() == 1 ? "has" : "have", format_seconds(w->waited),
                          then ? *then : std::string());
  return v;
}

std::string HangDetector::describe(int rank) const {
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  if (!st.monitored) return fmt::format("rank {} (no heartbeats)", rank);
  const RankReport& r = *st.report;
  std::vector<std::string> parts;
  if (!r.host.empty()) parts.push_back("host " + r.host);
  if (r.pid > 0) parts.push_back(fmt::format("pid {}", r.pid));
  if (r.step >= 0) parts.push_back(fmt::format("step {}", r.step));
  parts.push_back(std::string("phase ") + to_string(r.phase));
  if (!r.peer_waits.empty()) parts.push_back("in " + describe_peer_wait(r.peer_waits.front(), false));
  if (st.exited) parts.push_back("exited");
  std::string out = fmt::format("rank {} (", rank);
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : "") + parts[i];
  return out + ")";
}

std::string HangDetector::who(int rank) const {
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  if (st.monitored && !st.report->host.empty()) {
    return fmt::format("rank {} (host {}, pid {})", rank, st.report->host, st.report->pid);
  }
  const int pid = st.monitored ? st.report->pid : st.resources ? st.resources->pid : 0;
  return pid > 0 ? fmt::format("rank {} (pid {})", rank, pid) : fmt::format("rank {}", rank);
}

RankView HangDetector::rank_view(int rank, SteadyTime now) const {
  const RankState& st = ranks_[static_cast<size_t>(rank)];
  RankView v;
  v.rank = rank;
  v.monitored = st.monitored;
  v.exited = st.exited;
  if (st.monitored) {
    v.report = st.report;
    v.heartbeat_age = now - st.received_at;
  }
  if (st.resources) {
    v.resources = st.resources;
    v.resources_age = now - st.resources_at;
  }
  v.warnings = trouble_.given_to(rank);
  return v;
}

nlohmann::json HangDetector::details(const HangVerdict& v, SteadyTime now) const {
  nlohmann::json j;
  j["kind"] = to_string(v.kind);
  j["sequence"] = v.sequence;
  j["op"] = v.op;
  if (!v.group.empty()) {
    j["group"] = v.group;
    j["group_ranks"] = v.group_ranks;
  }
  j["culprits"] = v.culprits;
  j["waiting"] = v.waiting;
  j["summary"] = v.summary;
  j["hang_timeout_s"] = seconds(config_.hang_timeout);
  j["seconds_since_progress"] = seconds(now - last_progress_);
  nlohmann::json ranks = nlohmann::json::array();
  for (int i = 0; i < world_size(); ++i) {
    nlohmann::json r = rank_view_json(rank_view(i, now), clock_.wall_now());
    if (ranks_[static_cast<size_t>(i)].monitored) {
      const auto has = [i](const std::vector<int>& list) {
        return std::find(list.begin(), list.end(), i) != list.end();
      };
      r["role"] = has(v.culprits) ? "culprit" : has(v.waiting) ? "waiting" : "other";
    }
    ranks.push_back(std::move(r));
  }
  j["ranks"] = std::move(ranks);
  nlohmann::json notes = nlohmann::json::array();
  const std::string before = v.kind == HangKind::kDesync ? "before the desync" : "before the hang";
  for (int i = 0; i < world_size(); ++i) {
    const RankState& st = ranks_[static_cast<size_t>(i)];
    if (!st.resources) continue;
    for (std::string& note : st.history.notes(i, *st.resources, now, before)) notes.push_back(std::move(note));
  }
  constexpr size_t kMaxNotes = 8;  // a 16,384-rank report names what stands out, not every rank
  if (notes.size() > kMaxNotes) {
    const size_t more = notes.size() - kMaxNotes;
    notes.erase(notes.begin() + kMaxNotes, notes.end());
    notes.push_back(fmt::format("... and {} more such note(s)", more));
  }
  if (!notes.empty()) j["resource_notes"] = std::move(notes);
  if (trouble_.given() > 0) j["warnings"] = trouble_.recent_json();
  return j;
}

HealthView HangDetector::view() const {
  HealthView v;
  v.now = clock_.now();
  v.wall_now = clock_.wall_now();
  v.hang_timeout = config_.hang_timeout;
  v.ranks.reserve(ranks_.size());
  for (int i = 0; i < world_size(); ++i) {
    v.ranks.push_back(rank_view(i, v.now));
    if (v.ranks.back().monitored) v.since_progress = v.now - last_progress_;
  }
  v.recent = trouble_.recent();
  v.warnings_total = trouble_.given();
  return v;
}

nlohmann::json HangDetector::snapshot() const { return health_view_json(view()); }

}  // namespace ddp
