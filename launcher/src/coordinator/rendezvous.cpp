#include "coordinator/rendezvous.h"

#include <fmt/format.h>

#include <algorithm>

namespace ddp {

void Rendezvous::open(int64_t generation) {
  generation_ = generation;
  complete_ = false;
  pending_.clear();
  rank_taken_.assign(static_cast<size_t>(nnodes_), false);
}

Status Rendezvous::check(const JoinParams& p) const {
  if (p.generation != generation_) {
    return {StatusCode::kFailedPrecondition,
            fmt::format("generation {} is not open for joins (the job is at generation {})", p.generation, generation_)};
  }
  if (complete_) {
    return {StatusCode::kFailedPrecondition,
            fmt::format("the world of generation {} is already complete ({} nodes); join refused", generation_, nnodes_)};
  }
  if (p.nnodes != nnodes_) {
    return {StatusCode::kFailedPrecondition,
            fmt::format("world-size mismatch: this agent expects {} node(s), the job has {}", p.nnodes, nnodes_)};
  }
  if (p.nproc != nproc_) {
    return {StatusCode::kFailedPrecondition,
            fmt::format("nproc mismatch: this agent runs {} worker(s) per node, the job {}", p.nproc, nproc_)};
  }
  if (p.node_rank >= nnodes_ || p.node_rank < -1) {
    return {StatusCode::kInvalidArgument, fmt::format("node rank {} outside 0..{}", p.node_rank, nnodes_ - 1)};
  }
  if (p.node_rank >= 0 && rank_taken_[static_cast<size_t>(p.node_rank)]) {
    return {StatusCode::kAlreadyExists, fmt::format("duplicate node rank {}: another agent already has it", p.node_rank)};
  }
  return Status::Ok();
}

void Rendezvous::join(const JoinParams& params, SteadyTime deadline, JoinCallback done, FiredJoins& fired) {
  if (Status s = check(params); !s.ok()) {
    fired.push_back({std::move(done), s, {}});
    return;
  }
  if (params.node_rank >= 0) rank_taken_[static_cast<size_t>(params.node_rank)] = true;
  pending_.push_back({params, deadline, std::move(done)});
  if (static_cast<int>(pending_.size()) == nnodes_) form_world(fired);
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

  std::vector<size_t> by_rank(pending_.size());
  for (size_t i = 0; i < pending_.size(); ++i) by_rank[static_cast<size_t>(rank_of[i])] = i;
  std::vector<int> rank_start(pending_.size() + 1, 0);
  for (size_t r = 0; r < by_rank.size(); ++r) {
    rank_start[r + 1] = rank_start[r] + pending_[by_rank[r]].params.nproc;
  }
  const JoinParams& master = pending_[by_rank[0]].params;

  hosts_by_rank_.assign(pending_.size(), {});
  previous_rank_of_host_.clear();
  for (size_t i = 0; i < pending_.size(); ++i) {
    const auto r = static_cast<size_t>(rank_of[i]);
    Assignment a;
    a.node_rank = rank_of[i];
    a.nnodes = nnodes_;
    a.rank_start = rank_start[r];
    a.world_size = rank_start.back();
    a.generation = generation_;
    a.master_addr = master.host;
    a.master_port = master.master_port;
    a.host = pending_[i].params.host;
    hosts_by_rank_[r] = a.host;
    previous_rank_of_host_.emplace(a.host, a.node_rank);
    fired.push_back({std::move(pending_[i].done), Status::Ok(), a});
  }
  pending_.clear();
  complete_ = true;
}

void Rendezvous::abort(const Status& status, FiredJoins& fired) {
  for (auto& p : pending_) fired.push_back({std::move(p.done), status, {}});
  pending_.clear();
  rank_taken_.assign(static_cast<size_t>(nnodes_), false);
}

std::optional<std::string> Rendezvous::waiting_summary() const {
  if (complete_ || pending_.empty()) return std::nullopt;
  constexpr size_t kNamed = 8;  // a line, not a list of thousands
  std::vector<std::string> hosts;
  for (size_t i = 0; i < pending_.size() && i < kNamed; ++i) hosts.push_back(pending_[i].params.host);
  std::string line = fmt::format("{} of {} node(s) joined generation {} (hosts: {}{})", pending_.size(), nnodes_,
                                 generation_, fmt::join(hosts, ", "), pending_.size() > kNamed ? ", ..." : "");
  std::vector<int> untaken;
  for (int r = 0; r < nnodes_; ++r) {
    if (!rank_taken_[static_cast<size_t>(r)]) untaken.push_back(r);
  }
  // Only when every joined agent asked for its rank are the free ranks
  // exactly the missing nodes; an auto-ranked agent holds no rank yet.
  if (untaken.size() == static_cast<size_t>(nnodes_) - pending_.size()) {
    const bool more = untaken.size() > kNamed;
    untaken.resize(std::min(untaken.size(), kNamed));
    line += fmt::format("; not joined yet: node rank(s) {}{}", fmt::join(untaken, ", "), more ? ", ..." : "");
  }
  return line;
}

bool Rendezvous::expire(SteadyTime now, FiredJoins& fired) {
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
                                   pending_.size(), nnodes_, generation_, fmt::join(joined, ", "),
                                   pending_.size() > kHostsNamed ? ", ..." : "")};
  for (auto& p : pending_) fired.push_back({std::move(p.done), timeout, {}});
  pending_.clear();
  rank_taken_.assign(static_cast<size_t>(nnodes_), false);
  return true;
}

}  // namespace ddp
