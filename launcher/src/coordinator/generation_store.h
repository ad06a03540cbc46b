#pragma once
// GenerationStore: what the ranks of one generation share through the
// coordinator: the KV store (Gloo's rendezvous, user barriers, the runtime's
// keys), barriers built on it, and the NCCL unique ID of each communicator
// key (the same bytes for every caller). A new generation starts from an
// empty one: nothing crosses a restart.
//
// Threading: not thread-safe (CoordinatorJob serializes); completed waits go
// to the caller's FiredWaits, to run after its lock is released.

#include <map>
#include <string>

#include "coordinator/unique_id_source.h"
#include "ddp/common/kv_store.h"

namespace ddp {

class GenerationStore {
 public:
  /// ids: where NCCL IDs come from (not owned; outlives the store).
  explicit GenerationStore(UniqueIdSource& ids) : ids_(ids) {}

  KvStore& kv() { return kv_; }
  /// Completes once `participants` callers have entered barrier `name` (one
  /// barrier per name per generation), or at deadline.
  void barrier(const std::string& name, int participants, SteadyTime deadline, WaitCallback done,
               FiredWaits& fired);
  /// The ID of comm_key, made by the first caller.
  const std::string& nccl_id(const std::string& comm_key);
  /// Ends every wait with `why` and forgets everything (the generation ended).
  void clear(const Status& why, FiredWaits& fired);

 private:
  UniqueIdSource& ids_;
  KvStore kv_;
  std::map<std::string, std::string> nccl_ids_;
};

}  // namespace ddp
