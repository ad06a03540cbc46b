#pragma once
// Which rank holds up point-to-point transfers: the hang detector's look
// where no rank waits in a collective. Python ranks report the sends and
// receives they have in flight (RankReport::peer_waits). A pipeline's stages
// wait for each other there; the rank the waits lead to that itself waits
// for no peer (it sleeps, loops, or has left) is the one to blame. Where the
// waits go round instead (each rank of a cycle receives from the next before
// it sends, so no send is ever reached), the ranks of the cycle are.
// Threading: free functions over the caller's data, no shared state.

#include <optional>
#include <string>
#include <vector>

#include "health/rank_health.h"

namespace ddp {

/// One rank's wait for a given peer, as the search used it.
struct PeerEdge {
  int rank = -1;
  PeerWait wait;   // its longest wait for that peer (peer >= 0)
};

struct PeerBlock {
  std::vector<int> culprits;   // ascending: ranks the waits end at, or the ranks of a cycle
  std::vector<int> waiting;    // ascending: the other ranks with waits that lead there
  bool cycle = false;          // the waits go round: every rank they reach waits too
  std::vector<PeerEdge> edges; // every wait for a given peer, by rank then peer
};

/// Looks at the waits of the ranks in `among` (ascending; reports indexed by
/// rank, null for a rank without heartbeats, which waits for nobody). A wait
/// for a rank outside the world leads nowhere. Receives from any source
/// (peer -1) count only where no rank waits for a given peer: the culprits
/// are then the ranks in no send or receive, which the senders must be
/// among, or, where every rank receives, the receiving ranks (a cycle).
/// nullopt: no rank in `among` waits for a given peer or in such a receive.
std::optional<PeerBlock> find_peer_block(const std::vector<const RankReport*>& reports, const std::vector<int>& among);

/// Whether `op` receives (recv, irecv).
bool is_receive(const std::string& op);

/// "from" for a receive, else "to": which way a wait's peer is.
const char* peer_direction(const std::string& op);

/// "recv (2.0 KiB) from rank 0" / "send to rank 3" / "recv from any rank":
/// what a wait is; without its bytes where `with_bytes` is false.
std::string describe_peer_wait(const PeerWait& wait, bool with_bytes = true);

}  // namespace ddp
