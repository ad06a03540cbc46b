#include <future>
#include <mutex>

#include "ddp/common/kv_store.h"
#include "ddp/common/store.h"

namespace ddp {
namespace {

// The coordinator's KvStore behind a mutex; waits park a promise.
class InMemoryStore final : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    FiredWaits fired;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      kv_.set(key, value, fired);
    }
    for (auto& f : fired) f();
  }

  std::optional<std::string> get(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return kv_.get(key);
  }

  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    auto done = std::make_shared<std::promise<Status>>();
    auto result = done->get_future();
    FiredWaits fired;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      kv_.wait(keys, SteadyTime::max(), [done](const Status& s) { done->set_value(s); }, fired);
    }
    for (auto& f : fired) f();
    if (result.wait_for(timeout) != std::future_status::ready) {
      throw StoreError({StatusCode::kDeadlineExceeded, "timed out waiting for store keys"});
    }
    if (const Status s = result.get(); !s.ok()) throw StoreError(s);
  }

  int64_t add(const std::string& key, int64_t delta) override {
    FiredWaits fired;
    int64_t result = 0;
    Status s;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      s = kv_.add(key, delta, result, fired);
    }
    for (auto& f : fired) f();
    if (!s.ok()) throw StoreError(s);
    return result;
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired) override {
    FiredWaits fired;
    std::string current;
    bool swapped = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      swapped = kv_.compare_set(key, expected, desired, current, fired);
    }
    for (auto& f : fired) f();
    return swapped;
  }

 private:
  std::mutex mutex_;
  KvStore kv_;
};

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix) : base_(std::move(base)), prefix_(std::move(prefix) + "/") {}
  void set(const std::string& key, const std::string& value) override { base_->set(prefix_ + key, value); }
  std::optional<std::string> get(const std::string& key) override { return base_->get(prefix_ + key); }
  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    base_->wait(full, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return base_->add(prefix_ + key, delta); }
  bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired) override {
    return base_->compare_set(prefix_ + key, expected, desired);
  }

 private:
  std::shared_ptr<Store> base_;
  std::string prefix_;
};

}  // namespace

std::string Store::wait_get(const std::string& key, Duration timeout) {
  wait({key}, timeout);
  auto value = get(key);
  if (!value) throw StoreError({StatusCode::kNotFound, "key '" + key + "' vanished after wait"});
  return *value;
}

std::shared_ptr<Store> make_in_memory_store() { return std::make_shared<InMemoryStore>(); }

std::shared_ptr<Store> make_prefix_store(std::shared_ptr<Store> base, std::string prefix) {
  return std::make_shared<PrefixStore>(std::move(base), std::move(prefix));
}

}  // namespace ddp
