#include "coordinator/generation_store.h"

namespace ddp {

void GenerationStore::barrier(const std::string& name, int participants, SteadyTime deadline, WaitCallback done,
                              FiredWaits& fired) {
  // A counter and a release key in the store: the last to arrive sets the
  // release key, which every participant waits for.
  const std::string count_key = "__ddplaunch/barrier/" + name + "/count";
  const std::string done_key = "__ddplaunch/barrier/" + name + "/done";
  int64_t arrived = 0;
  if (Status s = kv_.add(count_key, 1, arrived, fired); !s.ok()) {
    fired.push_back({std::move(done), s});
    return;
  }
  if (arrived >= participants) kv_.set(done_key, "1", fired);
  kv_.wait({done_key}, deadline, std::move(done), fired);
}

const std::string& GenerationStore::nccl_id(const std::string& comm_key) {
  auto it = nccl_ids_.find(comm_key);
  if (it == nccl_ids_.end()) it = nccl_ids_.emplace(comm_key, ids_.create_id()).first;
  return it->second;
}

void GenerationStore::clear(const Status& why, FiredWaits& fired) {
  kv_.abort_waits(why, fired);
  kv_ = KvStore();
  nccl_ids_.clear();
}

}  // namespace ddp
