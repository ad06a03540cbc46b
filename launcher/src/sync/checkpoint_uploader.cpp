#include "sync/checkpoint_uploader.h"

#include <filesystem>

namespace ddp {
namespace {

// The folder exists before the watch needs it: a job may create it later.
const std::string& created(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  return dir;
}

}  // namespace

CheckpointUploader::CheckpointUploader(SyncTarget target, ObjectStore& store, const Clock& clock, UploadPolicy policy)
    : target_(std::move(target)), store_(store), watch_(created(target_.dir)), queue_(clock, policy) {}

std::optional<SteadyTime> CheckpointUploader::run_once() {
  const std::vector<DirectoryWatch::Event> events = watch_.read_events();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : events) {
      if (e.kind == DirectoryWatch::Event::Kind::kFinished) {
        queue_.file_ready(e.relative_path);
      } else {
        queue_.file_gone(e.relative_path);
      }
    }
  }
  for (;;) {
    std::optional<std::string> due;
    {
      std::lock_guard<std::mutex> lock(mu_);
      due = queue_.next_due();
    }
    if (!due) break;
    int64_t bytes = 0;
    // The send runs unlocked: report() must not wait for a slow bucket.
    const Status outcome =
        store_.put_file(object_key(target_, *due), (std::filesystem::path(target_.dir) / *due).string(), &bytes);
    std::lock_guard<std::mutex> lock(mu_);
    queue_.done(*due, outcome, bytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.next_due_time();
}

bool CheckpointUploader::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.idle();
}

SyncReport CheckpointUploader::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.report();
}

}  // namespace ddp
