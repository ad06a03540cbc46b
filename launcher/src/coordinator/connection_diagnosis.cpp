#include "coordinator/connection_diagnosis.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace ddp {

struct ConnectionDiagnosis::Shared {
  std::mutex mutex;
  std::condition_variable done;
  bool running = false;
  std::chrono::steady_clock::time_point started;  // of the running one
  uint64_t finished = 0;  // diagnoses finished so far
  std::string latest;
};

ConnectionDiagnosis::ConnectionDiagnosis(std::function<std::string()> diagnose)
    : diagnose_(std::move(diagnose)), shared_(std::make_shared<Shared>()) {}

void ConnectionDiagnosis::start() {
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    if (shared_->running) return;
    shared_->running = true;
    shared_->started = std::chrono::steady_clock::now();
  }
  std::thread([shared = shared_, diagnose = diagnose_] {
    std::string line = diagnose();
    {
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->latest = std::move(line);
      shared->running = false;
      ++shared->finished;
    }
    shared->done.notify_all();
  }).detach();
}

std::string ConnectionDiagnosis::latest() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  return shared_->latest;
}

std::chrono::steady_clock::duration ConnectionDiagnosis::running_for() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (!shared_->running) return {};
  return std::chrono::steady_clock::now() - shared_->started;
}

std::string ConnectionDiagnosis::finish_within(std::chrono::milliseconds budget) {
  start();
  std::unique_lock<std::mutex> lock(shared_->mutex);
  const uint64_t seen = shared_->running ? shared_->finished : shared_->finished - 1;
  shared_->done.wait_for(lock, budget, [&] { return shared_->finished > seen; });
  return shared_->latest;
}

}  // namespace ddp
