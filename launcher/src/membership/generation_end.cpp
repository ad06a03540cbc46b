#include "membership/generation_end.h"

#include <fmt/format.h>

#include <algorithm>

#include "exit_codes.h"
#include "membership/failover.h"

namespace ddp {

const char* to_string(Departure::Why why) {
  switch (why) {
    case Departure::Why::kLost: return "lost";
    case Departure::Why::kLeft: return "left";
    case Departure::Why::kExcluded: return "excluded";
  }
  return "unknown";
}

int voters(const GenerationEnd& end, int nodes) {
  return nodes - static_cast<int>(std::count_if(end.departures.begin(), end.departures.end(),
                                                [](const Departure& d) { return d.why != Departure::Why::kLost; }));
}

namespace {

bool own_failure(const NodeOutcome& o) { return !o.success && !o.stopped; }

// Gone on its own: silent (the coordinator's verdict) or signalled away.
std::optional<Departure::Why> gone(const NodeOutcome& o) {
  if (o.leaving) return Departure::Why::kLeft;
  if (own_failure(o) && o.exit_code == exit_code::kNodeLost) return Departure::Why::kLost;
  return std::nullopt;
}

GenerationEnd finish(GenerationEnd end, int code, std::string reason) {
  end.restart = false;
  end.exit_code = code;
  end.reason = std::move(reason);
  return end;
}

}  // namespace

GenerationEnd decide_generation_end(const std::vector<NodeEnd>& nodes, const std::optional<NodeOutcome>& root_cause,
                                    const MembershipRules& rules) {
  GenerationEnd end;
  const bool elastic = rules.min_nnodes < rules.max_nnodes;
  int survivors = 0;
  for (size_t r = 0; r < nodes.size(); ++r) {
    const NodeOutcome& o = nodes[r].outcome;
    if (std::optional<Departure::Why> why = gone(o)) {
      end.departures.push_back({static_cast<int>(r), *why, o.description, o.exit_code});
    } else {
      ++survivors;
    }
  }
  const bool node_gone = !end.departures.empty();

  // Streaks: a generation that lost a node neither extends nor breaks them
  // (the survivors' failures were its consequence).
  for (const NodeEnd& n : nodes) {
    const bool failed = own_failure(n.outcome) && !gone(n.outcome);
    end.failure_streaks.push_back(node_gone ? n.failure_streak : (failed ? n.failure_streak + 1 : 0));
  }

  for (const NodeEnd& n : nodes) {
    if (n.outcome.exit_code == exit_code::kRequeue && !n.outcome.success) {
      return finish(std::move(end), exit_code::kRequeue, n.outcome.description);
    }
  }
  if (!root_cause && !node_gone && !rules.grow_requested) return finish(std::move(end), 0, "");

  // A lost node may be alive on the other side of a partition, failing over
  // to the next endpoint: only a majority may go on. Nodes that left on a
  // signal run nowhere else, so they do not vote.
  const bool lost = std::any_of(end.departures.begin(), end.departures.end(),
                                [](const Departure& d) { return d.why == Departure::Why::kLost; });
  const int voting = voters(end, static_cast<int>(nodes.size()));
  if (rules.majority_needed && lost && !keeps_majority(survivors, voting)) {
    std::string reason =
        fmt::format("{}; only {} of the generation's {} node(s) remain here, not a majority: the job ends on this "
                    "side, as the others may go on at the next coordinator endpoint",
                    end.departures.front().description, survivors, voting);
    return finish(std::move(end), exit_code::kNodeLost, std::move(reason));
  }

  // Poison nodes leave an elastic job while enough others remain.
  std::vector<std::string> excluded;
  if (elastic && rules.max_node_failures > 0) {
    for (size_t r = 0; r < nodes.size(); ++r) {
      const NodeEnd& n = nodes[r];
      if (end.failure_streaks[r] < rules.max_node_failures || n.hosts_coordinator || gone(n.outcome)) continue;
      if (survivors - 1 < rules.min_nnodes) break;
      --survivors;
      std::string description = fmt::format(
          "node {} ({}) is excluded from the job: its workers failed {} generation(s) in a row (last: {})", r, n.host,
          end.failure_streaks[r], n.outcome.description);
      excluded.push_back(description);
      end.departures.push_back({static_cast<int>(r), Departure::Why::kExcluded, std::move(description),
                                n.outcome.exit_code});
    }
  }
  const std::string exclusions = excluded.empty() ? "" : fmt::format("; {}", fmt::join(excluded, "; "));

  if (node_gone && elastic && survivors >= rules.min_nnodes && survivors > 0) {
    end.restart = true;
    end.membership_change = true;
    end.reason = fmt::format("{}{}; re-forming with the {} other node(s) (a membership change: the restart budget is "
                             "untouched)",
                             end.departures.front().description, exclusions, survivors);
    return end;
  }
  if (!root_cause && !node_gone) {  // only newcomers: grow
    end.restart = true;
    end.membership_change = true;
    end.reason = "a node is waiting to join: re-forming with it (a membership change: the restart budget is untouched)";
    return end;
  }
  // A failure: the first one, or the first node gone where nothing else failed.
  const int code = root_cause ? root_cause->exit_code : end.departures.front().exit_code;
  const std::string cause = root_cause ? root_cause->description : end.departures.front().description;
  if (rules.restarts_used < rules.max_restarts) {
    end.restart = true;
    end.counts_as_restart = true;
    end.reason = fmt::format("{}{}; restart {} of {}", cause, exclusions, rules.restarts_used + 1, rules.max_restarts);
    return end;
  }
  end.departures.erase(std::remove_if(end.departures.begin(), end.departures.end(),
                                      [](const Departure& d) { return d.why == Departure::Why::kExcluded; }),
                       end.departures.end());
  return finish(std::move(end), code, cause);
}

}  // namespace ddp
