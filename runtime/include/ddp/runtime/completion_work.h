#pragma once
// CompletionWork: a Work that whoever runs the collective finishes by hand
// (a backend's thread, or a test fake). Waiters block on a condition variable.
//
// Threading: finish() from one thread, wait()/is_completed()/error() from any.

#include <condition_variable>
#include <mutex>

#include "ddp/runtime/collective.h"

namespace ddp {

class CompletionWork final : public Work {
 public:
  explicit CompletionWork(uint64_t sequence) : sequence_(sequence) {}

  bool wait(Duration timeout) override {
    std::unique_lock<std::mutex> lock(mutex_);
    auto done = [&] { return done_; };
    // wait_for with Duration::max() would overflow the deadline arithmetic.
    if (timeout >= std::chrono::hours(24 * 365)) {
      cv_.wait(lock, done);
    } else if (!cv_.wait_for(lock, timeout, done)) {
      return false;
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }
  bool is_completed() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  std::exception_ptr error() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  uint64_t sequence() const override { return sequence_; }

  /// Ends the work: null error for success.
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      error_ = std::move(error);
    }
    cv_.notify_all();
  }

 private:
  const uint64_t sequence_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace ddp
