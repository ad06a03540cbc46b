#include "health/hang_verdict.h"

namespace ddp {

const char* to_string(HangKind kind) {
  switch (kind) {
    case HangKind::kSilentRank: return "silent_rank";
    case HangKind::kStuckCollective: return "stuck_collective";
    case HangKind::kDesync: return "desync";
  }
  return "unknown";
}

}  // namespace ddp
