#include "gloo_store_adapter.h"

#include <gloo/common/error.h>

namespace ddp {

GlooStoreAdapter::GlooStoreAdapter(std::shared_ptr<ddp::Store> store, Duration timeout)
    : store_(std::move(store)), timeout_(timeout) {}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  try {
    store_->set(key, std::string(data.begin(), data.end()));
  } catch (const StoreError& e) {
    throw gloo::IoException("store set '" + key + "' failed: " + e.what());
  }
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  try {
    const std::string value = store_->wait_get(key, timeout_);
    return std::vector<char>(value.begin(), value.end());
  } catch (const StoreError& e) {
    throw gloo::IoException("store get '" + key + "' failed: " + e.what());
  }
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  try {
    store_->wait(keys, timeout_);
  } catch (const StoreError& e) {
    throw gloo::IoException(std::string("store wait failed: ") + e.what());
  }
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  try {
    store_->wait(keys, std::chrono::duration_cast<Duration>(timeout));
  } catch (const StoreError& e) {
    throw gloo::IoException(std::string("store wait failed: ") + e.what());
  }
}

}  // namespace ddp
