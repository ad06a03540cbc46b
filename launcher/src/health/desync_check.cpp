#include "health/desync_check.h"

#include <algorithm>

#include <fmt/format.h>

#include "health/rank_list.h"
#include "output/byte_size.h"

namespace ddp {

namespace {

// The first report of each collective, the default group's: how far back a
// lagging rank's report is still compared.
constexpr size_t kFirstSeenDefault = 1024;
constexpr size_t kFirstSeenGroups = 64;    // other groups whose collectives are compared
constexpr size_t kFirstSeenPerGroup = 64;
// What each rank issued: enough to list it in a desync a few calls back.
constexpr size_t kIssuedPerGroup = 64;
constexpr size_t kIssuedGroups = 16;

/// "4.0 KiB (4096 B)" where the rounded size could hide the difference.
std::string format_bytes_exact(int64_t bytes) {
  if (bytes < 1024) return format_bytes(bytes);
  return fmt::format("{} ({} B)", format_bytes(bytes), bytes);
}

/// Erases the smallest keys until `m` holds `bound`.
template <typename Map>
void keep_last(Map& m, size_t bound) {
  while (m.size() > bound) m.erase(m.begin());
}

/// The rank's progress on `group` ("" the default one), null if it does not
/// report that group.
const SubgroupProgress* progress_in(const RankReport& r, const std::string& group) {
  for (const SubgroupProgress& g : r.subgroups) {
    if (g.group == group) return &g;
  }
  return nullptr;
}

/// Collective `k` of the group as the rank reports it: the one open, else
/// among its last calls; null where neither is.
const CollectiveSeen* call_in(const SubgroupProgress* g, uint64_t k) {
  if (!g) return nullptr;
  if (g->open && g->open->sequence == k) return &*g->open;
  for (const CollectiveSeen& c : g->recent) {
    if (c.sequence == k) return &c;
  }
  return nullptr;
}

}  // namespace

DesyncCheck::DesyncCheck(int world_size) { reset(world_size); }

void DesyncCheck::reset(int world_size) {
  first_.clear();
  issued_.assign(static_cast<size_t>(std::max(world_size, 0)), Issued{});
  desync_.reset();
}

void DesyncCheck::record(const RankReport& report, SteadyTime now) {
  if (report.rank < 0 || static_cast<size_t>(report.rank) >= issued_.size()) return;
  const auto sig = [&](const CollectiveSeen& c) { return Signature{report.rank, c.op, c.bytes, c.dtype}; };
  for (const CollectiveSeen& c : report.recent) {
    if (c.sequence != 0) compare("", c.sequence, sig(c), now);
  }
  // Of another group, its last calls and the one open: a rank in a
  // mismatched one may wait in it (or have announced it before aborting),
  // or the call may have completed all the same.
  for (const SubgroupProgress& g : report.subgroups) {
    for (const CollectiveSeen& c : g.recent) {
      if (c.sequence != 0) compare(g.group, c.sequence, sig(c), now);
    }
    if (g.open && g.open->sequence != 0) compare(g.group, g.open->sequence, sig(*g.open), now);
  }
  keep_last(first_[""], kFirstSeenDefault);
  for (auto& [group, seen] : first_) {
    if (!group.empty()) keep_last(seen, kFirstSeenPerGroup);
  }
  while (first_.size() > kFirstSeenGroups + 1) first_.erase(std::next(first_.begin()));  // "" sorts first
  Issued& mine = issued_[static_cast<size_t>(report.rank)];
  for (auto& [group, calls] : mine) keep_last(calls, kIssuedPerGroup);
  while (mine.size() > kIssuedGroups + 1) mine.erase(std::next(mine.begin()));
}

void DesyncCheck::compare(const std::string& group, uint64_t sequence, const Signature& sig, SteadyTime now) {
  // The same rank may learn more of a collective it is in: a Python rank
  // inside a coalesced block knows its op once the first call is made, and
  // the block's bytes as it ends. What it did not know yet is filled in, so
  // that the other ranks are compared with all of it.
  const auto learn = [&](Signature& known) {
    if (!collective_op_known(known.op)) known.op = sig.op;
    if (known.bytes <= 0) known.bytes = sig.bytes;
    if (known.dtype.empty()) known.dtype = sig.dtype;
  };
  auto [mine, new_to_rank] = issued_[static_cast<size_t>(sig.rank)][group].try_emplace(sequence, sig);
  if (!new_to_rank) learn(mine->second);

  auto [it, inserted] = first_[group].try_emplace(sequence, sig);
  Signature& ref = it->second;
  if (inserted) return;
  if (ref.rank == sig.rank) {
    learn(ref);
    return;
  }
  const bool op_differs = collective_op_known(ref.op) && collective_op_known(sig.op) && ref.op != sig.op;
  const bool dtype_differs = !ref.dtype.empty() && !sig.dtype.empty() && ref.dtype != sig.dtype;
  const bool bytes_differ = ref.bytes > 0 && sig.bytes > 0 && ref.bytes != sig.bytes;  // 0: unknown
  if (!op_differs && !dtype_differs && !bytes_differ) return;
  // The first desync is the one reported. Its pair is kept, as the first
  // report may be older than its rank's own record still reaches; the ranks
  // that disagree later are listed from what each issued (issued_).
  if (!desync_) desync_ = Desync{sequence, group, {ref, sig}, now};
}

const DesyncCheck::Signature* DesyncCheck::issued_k(int rank) const {
  for (const Signature& s : desync_->seen) {
    if (s.rank == rank) return &s;
  }
  const Issued& issued = issued_[static_cast<size_t>(rank)];
  const auto group = issued.find(desync_->group);
  if (group == issued.end()) return nullptr;
  const auto call = group->second.find(desync_->sequence);
  return call == group->second.end() ? nullptr : &call->second;
}

bool DesyncCheck::past_k(const RankReport& report) const {
  if (desync_->group.empty()) return report.last_enqueued >= desync_->sequence;
  const SubgroupProgress* g = progress_in(report, desync_->group);
  return g && g->last_enqueued >= desync_->sequence;
}

std::optional<HangVerdict> DesyncCheck::verdict(const std::vector<DesyncRank>& ranks, SteadyTime now,
                                                Duration wait) const {
  if (!desync_) return std::nullopt;
  const uint64_t k = desync_->sequence;
  const std::string& group = desync_->group;
  const size_t world = std::min(ranks.size(), issued_.size());
  // Of another group, its members as any of them reports them.
  std::vector<int> group_ranks;
  for (size_t i = 0; i < world && !group.empty() && group_ranks.empty(); ++i) {
    if (!ranks[i].report) continue;
    if (const SubgroupProgress* g = progress_in(*ranks[i].report, group)) group_ranks = g->ranks;
  }
  const auto member = [&](size_t i) {
    if (group.empty()) return true;
    if (group_ranks.empty()) return progress_in(*ranks[i].report, group) != nullptr;
    return std::find(group_ranks.begin(), group_ranks.end(), static_cast<int>(i)) != group_ranks.end();
  };
  if (now - desync_->found_at < wait) {
    for (size_t i = 0; i < world; ++i) {
      const DesyncRank& r = ranks[i];
      if (!r.report || !r.running || !member(i)) continue;
      if (!issued_k(static_cast<int>(i)) && !past_k(*r.report)) return std::nullopt;  // its report may be on its way
    }
  }

  struct Issuers {
    std::string op;
    int64_t bytes = 0;
    std::string dtype;
    std::vector<int> ranks;
  };
  std::vector<Issuers> groups;
  for (size_t i = 0; i < world; ++i) {
    const Signature* s = issued_k(static_cast<int>(i));
    if (!s) continue;
    auto same = std::find_if(groups.begin(), groups.end(), [&](const Issuers& g) {
      return g.op == s->op && g.bytes == s->bytes && g.dtype == s->dtype;
    });
    if (same == groups.end()) same = groups.insert(groups.end(), Issuers{s->op, s->bytes, s->dtype, {}});
    same->ranks.push_back(static_cast<int>(i));
  }
  std::sort(groups.begin(), groups.end(), [](const Issuers& a, const Issuers& b) {
    if (a.ranks.size() != b.ranks.size()) return a.ranks.size() > b.ranks.size();
    return a.ranks.front() < b.ranks.front();
  });

  HangVerdict v;
  v.kind = HangKind::kDesync;
  v.sequence = k;
  v.op = groups.front().op;
  const bool majority = groups.size() >= 2 && groups[0].ranks.size() > groups[1].ranks.size();
  for (size_t g = majority ? 1 : 0; g < groups.size(); ++g) {
    v.culprits.insert(v.culprits.end(), groups[g].ranks.begin(), groups[g].ranks.end());
  }
  std::sort(v.culprits.begin(), v.culprits.end());
  v.group = group;
  v.group_ranks = group_ranks;
  for (size_t i = 0; i < world; ++i) {
    if (!ranks[i].report) continue;
    const RankReport& r = *ranks[i].report;
    if (!group.empty()) {
      const CollectiveSeen* c = call_in(progress_in(r, group), k);
      if (c && (c->state == "enqueued" || c->state == "started")) v.waiting.push_back(static_cast<int>(i));
      continue;
    }
    for (const CollectiveSeen& c : open_collectives(r)) {
      if (c.sequence == k) v.waiting.push_back(static_cast<int>(i));
    }
  }
  const bool bytes_differ = std::any_of(groups.begin(), groups.end(),
                                        [&](const Issuers& g) { return g.bytes != groups.front().bytes; });
  std::string issued;
  for (const Issuers& g : groups) {
    if (!issued.empty()) issued += ", ";
    issued += fmt::format("{} {} {}", rank_word(g.ranks), g.op.empty() ? "?" : g.op,
                          bytes_differ ? format_bytes_exact(g.bytes) : format_bytes(g.bytes));
    if (!g.dtype.empty()) issued += " " + g.dtype;
  }
  v.summary = group.empty() ? fmt::format("desync at collective #{}: {}", k, issued)
                            : fmt::format("desync at collective #{} of group {}{}: {}", k, group,
                                          group_ranks.empty() ? std::string()
                                                              : " (ranks " + format_ranks(group_ranks) + ")",
                                          issued);
  return v;
}

}  // namespace ddp
