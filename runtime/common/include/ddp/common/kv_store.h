#pragma once
// KvStore: the key-value store of one (job, generation). Gloo rendezvous and
// user barriers are built on it. Waits are parked callbacks, not blocked
// threads, so thousands of waiting ranks cost no threads.
//
// Threading: not thread-safe; the owner (the coordinator's job, or
// InMemoryStore) serializes calls.
// Callbacks are not run by the store: operations return the waits they
// completed, and the caller runs them after releasing its lock.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "ddp/common/status.h"

namespace ddp {

/// Called once with Ok (all keys present), DeadlineExceeded or Aborted.
using WaitCallback = std::function<void(const Status&)>;

/// A completed wait and how it completed.
struct FiredWait {
  WaitCallback callback;
  Status status;
  void operator()() const { callback(status); }
};
using FiredWaits = std::vector<FiredWait>;

class KvStore {
 public:
  void set(const std::string& key, std::string value, FiredWaits& fired);
  std::optional<std::string> get(const std::string& key) const;
  /// Adds delta to the integer stored at key (absent counts as 0); returns the sum.
  /// A present value that is not an integer gives InvalidArgument, and so does
  /// a sum beyond 64 bits (nothing changes then).
  Status add(const std::string& key, int64_t delta, int64_t& result, FiredWaits& fired);
  /// Sets key to desired when its value is expected (or it is absent, with
  /// expect_absent). Returns whether it swapped; current gets the value after.
  bool compare_set(const std::string& key, const std::optional<std::string>& expected, std::string desired,
                   std::string& current, FiredWaits& fired);
  /// Removes every key starting with prefix; returns how many.
  int64_t delete_prefix(const std::string& prefix);
  /// Runs done(Ok) at once when every key is present, else parks it until they
  /// are or deadline passes.
  void wait(std::vector<std::string> keys, SteadyTime deadline, WaitCallback done, FiredWaits& fired);
  /// Expires parked waits whose deadline has passed.
  void expire(SteadyTime now, FiredWaits& fired);
  /// Ends every parked wait with status (the generation is over).
  void abort_waits(const Status& status, FiredWaits& fired);

  size_t size() const { return data_.size(); }
  size_t parked_waits() const { return waits_.size(); }

 private:
  struct Wait {
    std::vector<std::string> keys;
    SteadyTime deadline;
    WaitCallback done;
  };
  bool all_present(const std::vector<std::string>& keys) const;
  /// Releases the waits that key completed. Only waits on that key are
  /// looked at, so a store with thousands of parked waits (a barrier of
  /// every rank) stays O(log n) per write.
  void release_ready(const std::string& key, FiredWaits& fired);
  void forget(std::map<uint64_t, Wait>::iterator it);

  std::map<std::string, std::string> data_;
  std::map<uint64_t, Wait> waits_;                 // by id, oldest first
  std::multimap<std::string, uint64_t> waiting_on_;  // key -> ids of waits that name it
  uint64_t next_wait_id_ = 0;
};

}  // namespace ddp
