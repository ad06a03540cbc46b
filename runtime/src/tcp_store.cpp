#include "ddp/runtime/tcp_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace ddp {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

class TcpStore final : public Store {
 public:
  explicit TcpStore(c10::intrusive_ptr<c10d::TCPStore> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::string& value) override { call([&] { store_->set(key, bytes(value)); }); }

  std::optional<std::string> get(const std::string& key) override {
    std::optional<std::string> out;
    // c10d's get blocks until the key exists; ours answers at once.
    call([&] {
      if (store_->check({key})) out = text(store_->get(key));
    });
    return out;
  }

  void wait(const std::vector<std::string>& keys, Duration timeout) override {
    call([&] { store_->wait(keys, std::chrono::duration_cast<std::chrono::milliseconds>(timeout)); });
  }

  int64_t add(const std::string& key, int64_t delta) override {
    int64_t result = 0;
    call([&] { result = store_->add(key, delta); });
    return result;
  }

  bool compare_set(const std::string& key, const std::optional<std::string>& expected,
                   const std::string& desired) override {
    bool swapped = false;
    call([&] {
      // c10d compares against an empty expected value for "absent".
      const auto current = store_->compareSet(key, bytes(expected.value_or("")), bytes(desired));
      swapped = text(current) == desired;
    });
    return swapped;
  }

 private:
  template <typename F>
  void call(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      const std::string what = e.what();
      const bool timeout = what.find("imeout") != std::string::npos || what.find("imed out") != std::string::npos;
      throw StoreError({timeout ? StatusCode::kDeadlineExceeded : StatusCode::kUnavailable, what});
    }
  }

  c10::intrusive_ptr<c10d::TCPStore> store_;
};

}  // namespace

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, bool is_server, int world_size,
                                      Duration timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = is_server;
  options.numWorkers = world_size;
  options.waitWorkers = false;
  options.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  try {
    return std::make_shared<TcpStore>(c10::make_intrusive<c10d::TCPStore>(host, options));
  } catch (const std::exception& e) {
    throw StoreError({StatusCode::kUnavailable,
                      std::string("cannot reach the TCP store at ") + host + ":" + std::to_string(port) + ": " + e.what()});
  }
}

}  // namespace ddp
