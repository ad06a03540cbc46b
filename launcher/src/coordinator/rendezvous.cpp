#include "coordinator/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace ddp {

void Rendezvous::open(int64_t generation, std::optional<std::vector<std::string>> expected, int expected_count,
                      int at_least) {
  generation_ = generation;
  expected_count_ = expected_count;
  at_least_ = at_least;
  complete_ = false;
  pending_.clear();
  last_call_at_.reset();
  rank_taken_.assign(static_cast<size_t>(max_nnodes_), false);
  expected_ = expected ? std::move(*expected) : members_by_rank_;
  admit_waiting();
}

void Rendezvous::admit_waiting() {
  if (!elastic()) {
    // Agents that (re)started while the last world ran: each takes its node
    // rank in this one while it is free (a second asking for it waits on,
    // and is refused at its deadline).
    std::vector<Pending> still;
    for (Pending& p : waiting_) {
      const int rank = p.params.node_rank;
      if (static_cast<int>(pending_.size()) >= max_nnodes_ || (rank >= 0 && rank_taken_[static_cast<size_t>(rank)])) {
        still.push_back(std::move(p));
        continue;
      }
      if (rank >= 0) rank_taken_[static_cast<size_t>(rank)] = true;
      p.params.generation = generation_;
      pending_.push_back(std::move(p));
    }
    waiting_ = std::move(still);
    return;
  }
  size_t admitted = 0;
  while (admitted < waiting_.size() && static_cast<int>(expected_.size()) < max_nnodes_) {
    Pending& p = waiting_[admitted++];
    p.params.generation = generation_;
    p.params.node_rank = -1;  // an elastic world assigns ranks
    expected_.push_back(member_key(p.params));
    pending_.push_back(std::move(p));
  }
  waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(admitted));
}

bool Rendezvous::hosts_coordinator(int node_rank) const {
  return node_rank >= 0 && static_cast<size_t>(node_rank) < coordinator_host_by_rank_.size() &&
         coordinator_host_by_rank_[static_cast<size_t>(node_rank)];
}

std::string Rendezvous::expected_nodes() const {
  return elastic() ? fmt::format("{}:{}", min_nnodes_, max_nnodes_) : std::to_string(max_nnodes_);
}

bool Rendezvous::is_newcomer(const JoinParams& p) const {
  return elastic() && (p.generation != generation_ || complete_) && check_shape(p).ok();
}

bool Rendezvous::is_restarted_agent(const JoinParams& p) const {
  return !elastic() && p.generation <= generation_ && (p.generation < generation_ || complete_) &&
         check_shape(p).ok();
}

Status Rendezvous::check(const JoinParams& p) const {
  if (p.generation != generation_) {
    return {StatusCode::kFailedPrecondition,
            fmt::format("generation {} is not open for joins (the job is at generation {})", p.generation, generation_)};
  }
  if (complete_) {
    return {StatusCode::kFailedPrecondition, fmt::format("the world of generation {} is already complete ({} "
                                                         "nodes); join refused",
                                                         generation_, nnodes())};
  }
  if (Status s = check_shape(p); !s.ok()) return s;
  if (p.node_rank >= 0 && rank_taken_[static_cast<size_t>(p.node_rank)]) {
    return {StatusCode::kAlreadyExists, fmt::format("duplicate node rank {}: another agent already has it", p.node_rank)};
  }
  return Status::Ok();
}

Status Rendezvous::check_shape(const JoinParams& p) const {
  const int min = p.min_nnodes > 0 ? p.min_nnodes : p.nnodes;
  if (p.nnodes != max_nnodes_ || min != min_nnodes_) {
    const std::string asked = min < p.nnodes ? fmt::format("{}:{}", min, p.nnodes) : std::to_string(p.nnodes);
    return {StatusCode::kFailedPrecondition,
            fmt::format("world-size mismatch: this agent expects {} node(s), the job has {}", asked, expected_nodes())};
  }
  if (p.nproc != nproc_) {
    return {StatusCode::kFailedPrecondition,
            fmt::format("nproc mismatch: this agent runs {} worker(s) per node, the job {}", p.nproc, nproc_)};
  }
  if (p.node_rank >= max_nnodes_ || p.node_rank < -1) {
    return {StatusCode::kInvalidArgument, fmt::format("node rank {} outside 0..{}", p.node_rank, max_nnodes_ - 1)};
  }
  return Status::Ok();
}

void Rendezvous::join(const JoinParams& params, SteadyTime now, SteadyTime deadline, JoinCallback done,
                      FiredJoins& fired) {
  if (is_newcomer(params)) {
    if (complete_ || hold_newcomers_) {
      waiting_.push_back({params, deadline, std::move(done)});
      return;
    }
    // The next generation is forming: the newcomer is part of it.
    JoinParams admitted = params;
    admitted.generation = generation_;
    admitted.node_rank = -1;
    expected_.push_back(member_key(admitted));
    join(admitted, now, deadline, std::move(done), fired);
    return;
  }
  if (is_restarted_agent(params)) {
    // A fixed-size job: an agent that starts while the job runs (a
    // supervisor restarted a killed one) asks for generation 0 or for the
    // one it last knew. It waits for the next generation while this one's
    // world is complete, else joins the one forming.
    if (complete_) {
      waiting_.push_back({params, deadline, std::move(done)});
      return;
    }
    JoinParams current = params;
    current.generation = generation_;
    join(current, now, deadline, std::move(done), fired);
    return;
  }
  if (Status s = check(params); !s.ok()) {
    fired.push_back({std::move(done), s, {}});
    return;
  }
  if (params.node_rank >= 0) rank_taken_[static_cast<size_t>(params.node_rank)] = true;
  pending_.push_back({params, deadline, std::move(done)});
  if (static_cast<int>(pending_.size()) == max_nnodes_ || expected_are_back()) {
    form_world(fired);
  } else if (static_cast<int>(pending_.size()) >= fewest()) {
    last_call_at_ = now + last_call_;  // each newcomer restarts the last call, as torchrun's does
  }
}

bool Rendezvous::expected_are_back() const {
  if (!elastic() || static_cast<int>(pending_.size()) < fewest()) return false;
  if (expected_.empty()) return expected_count_ > 0 && static_cast<int>(pending_.size()) >= expected_count_;
  if (pending_.size() < expected_.size()) return false;
  std::multiset<std::string> missing(expected_.begin(), expected_.end());
  for (const Pending& p : pending_) {
    if (auto it = missing.find(member_key(p.params)); it != missing.end()) missing.erase(it);
  }
  return missing.empty();
}

bool Rendezvous::close_last_call(SteadyTime now, FiredJoins& fired) {
  if (complete_ || !last_call_at_ || now < *last_call_at_) return false;
  form_world(fired);
  return true;
}

bool Rendezvous::form_now(FiredJoins& fired) {
  if (complete_ || pending_.empty() || static_cast<int>(pending_.size()) < fewest()) return false;
  form_world(fired);
  return true;
}

void Rendezvous::form_world(FiredJoins& fired) {
  std::vector<int> rank_of(pending_.size(), -1);
  for (size_t i = 0; i < pending_.size(); ++i) rank_of[i] = pending_[i].params.node_rank;

  // A host keeps the rank it had in the previous generation when it is free.
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (rank_of[i] >= 0) continue;
    auto range = previous_rank_of_host_.equal_range(pending_[i].params.host);
    for (auto it = range.first; it != range.second; ++it) {
      if (!rank_taken_[static_cast<size_t>(it->second)]) {
        rank_of[i] = it->second;
        rank_taken_[static_cast<size_t>(it->second)] = true;
        previous_rank_of_host_.erase(it);
        break;
      }
    }
  }
  // The rest: the free ranks, lowest first, in arrival order.
  int next_free = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    if (rank_of[i] >= 0) continue;
    while (rank_taken_[static_cast<size_t>(next_free)]) ++next_free;
    rank_of[i] = next_free;
    rank_taken_[static_cast<size_t>(next_free)] = true;
  }

  // A smaller (elastic) world: the same order, without the gaps.
  std::vector<size_t> order(pending_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rank_of[a] < rank_of[b]; });
  for (size_t r = 0; r < order.size(); ++r) rank_of[order[r]] = static_cast<int>(r);

  std::vector<size_t> by_rank(pending_.size());
  for (size_t i = 0; i < pending_.size(); ++i) by_rank[static_cast<size_t>(rank_of[i])] = i;
  std::vector<int> rank_start(pending_.size() + 1, 0);
  for (size_t r = 0; r < by_rank.size(); ++r) {
    rank_start[r + 1] = rank_start[r] + pending_[by_rank[r]].params.nproc;
  }
  const JoinParams& master = pending_[by_rank[0]].params;

  hosts_by_rank_.assign(pending_.size(), {});
  members_by_rank_.assign(pending_.size(), {});
  coordinator_host_by_rank_.assign(pending_.size(), false);
  previous_rank_of_host_.clear();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const auto r = static_cast<size_t>(rank_of[i]);
    Assignment a;
    a.node_rank = rank_of[i];
    a.nnodes = static_cast<int>(pending_.size());
    a.rank_start = rank_start[r];
    a.world_size = rank_start.back();
    a.generation = generation_;
    a.master_addr = master.host;
    a.master_port = master.master_port;
    a.host = pending_[i].params.host;
    hosts_by_rank_[r] = a.host;
    members_by_rank_[r] = member_key(pending_[i].params);
    coordinator_host_by_rank_[r] = pending_[i].params.hosts_coordinator;
    previous_rank_of_host_.emplace(a.host, a.node_rank);
    fired.push_back({std::move(pending_[i].done), Status::Ok(), a});
  }
  world_nnodes_ = static_cast<int>(pending_.size());
  pending_.clear();
  last_call_at_.reset();
  complete_ = true;
}

void Rendezvous::abort(const Status& status, FiredJoins& fired) {
  for (auto& p : pending_) fired.push_back({std::move(p.done), status, {}});
  for (auto& p : waiting_) fired.push_back({std::move(p.done), status, {}});
  pending_.clear();
  waiting_.clear();
  last_call_at_.reset();
  rank_taken_.assign(static_cast<size_t>(max_nnodes_), false);
}

std::optional<std::string> Rendezvous::waiting_summary(SteadyTime now) const {
  if (complete_ || pending_.empty()) return std::nullopt;
  constexpr size_t kNamed = 8;  // a line, not a list of thousands
  std::vector<std::string> hosts;
  for (size_t i = 0; i < pending_.size() && i < kNamed; ++i) hosts.push_back(pending_[i].params.host);
  std::string line = fmt::format("{} of {} node(s) joined generation {} (hosts: {}{})", pending_.size(),
                                 expected_nodes(), generation_, fmt::join(hosts, ", "),
                                 pending_.size() > kNamed ? ", ..." : "");
  std::vector<int> untaken;
  for (int r = 0; r < max_nnodes_; ++r) {
    if (!rank_taken_[static_cast<size_t>(r)]) untaken.push_back(r);
  }
  // Only when every joined agent asked for its rank are the free ranks
  // exactly the missing nodes; an auto-ranked agent holds no rank yet.
  if (last_call_at_) {
    const double left = std::max(0.0, std::chrono::duration<double>(*last_call_at_ - now).count());
    line += fmt::format("; MIN reached: the world forms with the nodes present in {:.0f} s unless another joins",
                        left);
  }
  if (!elastic() && untaken.size() == static_cast<size_t>(max_nnodes_) - pending_.size()) {
    const bool more = untaken.size() > kNamed;
    untaken.resize(std::min(untaken.size(), kNamed));
    line += fmt::format("; not joined yet: node rank(s) {}{}", fmt::join(untaken, ", "), more ? ", ..." : "");
  }
  return line;
}

void Rendezvous::expire_waiting(SteadyTime now, FiredJoins& fired) {
  auto expired = std::stable_partition(waiting_.begin(), waiting_.end(),
                                       [now](const Pending& p) { return p.deadline > now; });
  for (auto it = expired; it != waiting_.end(); ++it) {
    const std::string why =
        elastic() ? fmt::format("timed out waiting for a place in the job: it runs generation {} with {} of at most "
                                "{} node(s), and no new generation formed",
                                generation_, nnodes(), max_nnodes_)
                  : fmt::format("timed out waiting for a place in the job: generation {} runs with all its {} node(s) "
                                "{}and none of them left (an agent started again after its node was lost joins the "
                                "next generation)",
                                generation_, max_nnodes_,
                                it->params.node_rank >= 0 ? fmt::format("(node rank {} among them) ", it->params.node_rank)
                                                          : std::string());
    fired.push_back({std::move(it->done), {StatusCode::kDeadlineExceeded, why}, {}});
  }
  waiting_.erase(expired, waiting_.end());
}

bool Rendezvous::expire(SteadyTime now, FiredJoins& fired) {
  expire_waiting(now, fired);
  if (complete_ || pending_.empty()) return false;
  const bool any_expired =
      std::any_of(pending_.begin(), pending_.end(), [now](const Pending& p) { return p.deadline <= now; });
  if (!any_expired) return false;
  // One agent giving up means the world cannot form: refuse them all, so
  // every agent reports the same rendezvous failure instead of waiting on.
  // Name a few hosts, not all: the message goes to every waiting agent.
  constexpr size_t kHostsNamed = 8;
  std::vector<std::string> joined;
  for (size_t i = 0; i < pending_.size() && i < kHostsNamed; ++i) joined.push_back(pending_[i].params.host);
  const Status timeout{StatusCode::kDeadlineExceeded,
                       fmt::format("rendezvous timed out: {} of {} node(s) joined generation {} (hosts: {}{})",
                                   pending_.size(), expected_nodes(), generation_, fmt::join(joined, ", "),
                                   pending_.size() > kHostsNamed ? ", ..." : "")};
  for (auto& p : pending_) fired.push_back({std::move(p.done), timeout, {}});
  pending_.clear();
  last_call_at_.reset();
  rank_taken_.assign(static_cast<size_t>(max_nnodes_), false);
  return true;
}

}  // namespace ddp
