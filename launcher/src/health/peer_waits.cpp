#include "health/peer_waits.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "output/byte_size.h"

namespace ddp {

bool is_receive(const std::string& op) { return op == "recv" || op == "irecv"; }

const char* peer_direction(const std::string& op) { return is_receive(op) ? "from" : "to"; }

std::string describe_peer_wait(const PeerWait& wait, bool with_bytes) {
  std::string out = wait.op;
  if (with_bytes && wait.bytes > 0) out += " (" + format_bytes(wait.bytes) + ")";
  const char* direction = peer_direction(wait.op);
  return wait.peer < 0 ? out + " " + direction + " any rank" : fmt::format("{} {} rank {}", out, direction, wait.peer);
}

namespace {

/// No rank waits for a given peer, but some receive from any source: the
/// ranks the senders must be among are those in no send or receive. Where
/// there are none, every rank looked at receives: they wait for one another.
std::optional<PeerBlock> find_any_source_block(const std::vector<const RankReport*>& reports,
                                               const std::vector<int>& among) {
  const int world = static_cast<int>(reports.size());
  PeerBlock out;
  for (int r : among) {
    if (r < 0 || r >= world) continue;
    const PeerWait* longest = nullptr;
    if (const RankReport* report = reports[static_cast<size_t>(r)]) {
      for (const PeerWait& w : report->peer_waits) {
        if (w.peer == -1 && is_receive(w.op) && (!longest || w.age > longest->age)) longest = &w;
      }
    }
    // Its other waits, if any, lead nowhere (a peer outside the world, itself).
    if (longest) {
      out.edges.push_back(PeerEdge{r, *longest});
      out.waiting.push_back(r);
    } else {
      out.culprits.push_back(r);
    }
  }
  if (out.edges.empty()) return std::nullopt;
  if (out.culprits.empty()) {
    out.cycle = true;
    out.culprits.swap(out.waiting);
  }
  return out;
}

}  // namespace

std::optional<PeerBlock> find_peer_block(const std::vector<const RankReport*>& reports, const std::vector<int>& among) {
  const int world = static_cast<int>(reports.size());
  // rank -> peer -> its longest wait for that peer
  std::map<int, std::map<int, PeerWait>> waits;
  for (int r : among) {
    if (r < 0 || r >= world || !reports[static_cast<size_t>(r)]) continue;
    for (const PeerWait& w : reports[static_cast<size_t>(r)]->peer_waits) {
      if (w.peer < 0 || w.peer >= world || w.peer == r) continue;
      PeerWait& kept = waits[r][w.peer];
      if (kept.op.empty() || w.age > kept.age) kept = w;
    }
  }
  if (waits.empty()) return find_any_source_block(reports, among);
  const auto waits_for_someone = [&waits](int r) { return waits.count(r) > 0; };

  PeerBlock out;
  for (const auto& [rank, peers] : waits) {
    for (const auto& [peer, w] : peers) out.edges.push_back(PeerEdge{rank, w});
  }
  // The ends: ranks waited for that wait for nobody.
  std::set<int> ends;
  for (const PeerEdge& e : out.edges) {
    if (!waits_for_someone(e.wait.peer)) ends.insert(e.wait.peer);
  }
  if (!ends.empty()) {
    out.culprits.assign(ends.begin(), ends.end());
    for (const auto& entry : waits) out.waiting.push_back(entry.first);
    return out;
  }
  // Every rank waited for waits too: the waits go round. Peel off the ranks
  // nobody waits for until none is left to peel; what stays is the cycles
  // (and the waits between them).
  out.cycle = true;
  std::map<int, int> waited_by;   // rank -> how many waiting ranks wait for it
  for (const auto& entry : waits) waited_by.emplace(entry.first, 0);
  for (const PeerEdge& e : out.edges) ++waited_by[e.wait.peer];
  std::vector<int> peel;
  for (const auto& [rank, n] : waited_by) {
    if (n == 0) peel.push_back(rank);
  }
  std::set<int> peeled;
  while (!peel.empty()) {
    const int r = peel.back();
    peel.pop_back();
    peeled.insert(r);
    for (const auto& [peer, w] : waits.at(r)) {
      if (--waited_by[peer] == 0) peel.push_back(peer);
    }
  }
  for (const auto& entry : waits) {
    (peeled.count(entry.first) ? out.waiting : out.culprits).push_back(entry.first);
  }
  return out;
}

}  // namespace ddp
