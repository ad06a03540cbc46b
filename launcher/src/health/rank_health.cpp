#include "health/rank_health.h"

namespace ddp {

const char* to_string(WorkerPhase phase) {
  switch (phase) {
    case WorkerPhase::kUnknown: return "unknown";
    case WorkerPhase::kData: return "data";
    case WorkerPhase::kForward: return "forward";
    case WorkerPhase::kBackward: return "backward";
    case WorkerPhase::kOptimizer: return "optimizer";
    case WorkerPhase::kCheckpoint: return "checkpoint";
    case WorkerPhase::kCollective: return "collective";
    case WorkerPhase::kOther: return "other";
  }
  return "unknown";
}

}  // namespace ddp
