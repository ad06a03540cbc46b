#pragma once
// Store: the key-value store a job's ranks meet through (Gloo rendezvous,
// barriers, small exchanges). Implementations: InMemoryStore (ranks as
// threads of one process, for tests) and the runtime's gRPC store (through the
// local agent to the coordinator). Plain C++: no LibTorch, no gRPC here.
//
// Threading: implementations are thread-safe.

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "ddp/common/status.h"

namespace ddp {

/// A store call that failed: timed out, refused, or the store is gone.
class StoreError : public std::runtime_error {
 public:
  explicit StoreError(const Status& status) : std::runtime_error(status.message()), code_(status.code()) {}
  StatusCode code() const { return code_; }

 private:
  StatusCode code_;
};

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  /// The value, or nullopt when the key is absent (does not wait).
  virtual std::optional<std::string> get(const std::string& key) = 0;
  /// Blocks until every key exists; throws StoreError (DeadlineExceeded) after timeout.
  virtual void wait(const std::vector<std::string>& keys, Duration timeout) = 0;
  /// Adds delta to the integer at key (absent: 0) and returns the result.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// Sets key to desired if it holds expected (nullopt: if absent); returns
  /// whether it did.
  virtual bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                           const std::string& desired) = 0;

  /// wait() then get(): the value of a key another rank will set.
  std::string wait_get(const std::string& key, Duration timeout);
};

/// A thread-safe store in this process's memory.
std::shared_ptr<Store> make_in_memory_store();

/// Every key of base, under "prefix/" (one store, many independent users).
std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, std::string prefix);

}  // namespace ddp
