#pragma once
// GlooStoreAdapter: a ddp::Store seen as a gloo::rendezvous::Store, so Gloo's
// rendezvous (connectFullMesh) runs over whatever store the job uses (the
// coordinator's KV store through the agent, or an in-memory store in tests).
//
// get() blocks until the key exists (as Gloo expects), up to the adapter's
// timeout; wait(keys) uses that timeout too, wait(keys, timeout) the one given.
// Store failures (StoreError) become gloo::IoException carrying the store's
// message, which is what Gloo's rendezvous code expects to see.
//
// Threading: as thread-safe as the underlying Store.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "ddp/common/clock.h"
#include "ddp/common/store.h"

namespace ddp {

class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<ddp::Store> store, Duration timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;

 private:
  std::shared_ptr<ddp::Store> store_;
  Duration timeout_;
};

}  // namespace ddp
