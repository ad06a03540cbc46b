#include "sync/checkpoint_uploader.h"

#include <spdlog/spdlog.h>

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

CheckpointUploader::CheckpointUploader(SyncTarget target, ObjectStore& store, const Clock& clock, UploadPolicy policy,
                                       bool mirror_deletions)
    : target_(std::move(target)),
      store_(store),
      clock_(clock),
      watch_(created(target_.dir)),
      mirror_deletions_(mirror_deletions),
      queue_(clock, policy) {
  if (mirror_deletions_) {
    for (const std::string& path : watch_.existing_files()) in_bucket_.insert(path);
  }
}

std::optional<SteadyTime> CheckpointUploader::run_once() {
  const std::vector<DirectoryWatch::Event> events = watch_.read_events();
  for (const auto& e : events) {
    if (e.kind == DirectoryWatch::Event::Kind::kFinished) {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.file_ready(e.relative_path);
    } else {
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.file_gone(e.relative_path);
      }
      if (mirror_deletions_ && in_bucket_.count(e.relative_path) != 0) delete_from_bucket(e.relative_path);
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
    const SteadyTime started = clock_.now();
    const Status outcome =
        store_.put_file(object_key(target_, *due), (std::filesystem::path(target_.dir) / *due).string(), &bytes);
    const double seconds = std::chrono::duration<double>(clock_.now() - started).count();
    note_outcome(*due, outcome);
    if (outcome.ok() && mirror_deletions_) in_bucket_.insert(*due);
    std::lock_guard<std::mutex> lock(mu_);
    if (outcome.ok()) send_seconds_ += seconds;
    queue_.done(*due, outcome, bytes);
  }
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.next_due_time();
}

void CheckpointUploader::note_outcome(const std::string& path, const Status& outcome) {
  if (outcome.ok()) {
    if (failing_) spdlog::info("--sync {}: uploads work again ({} sent)", describe(target_), path);
    failing_ = false;
  } else if (outcome.code() != StatusCode::kNotFound && !failing_) {
    failing_ = true;
    spdlog::warn("--sync {}: cannot upload {}: {}; retrying with backoff while the job runs on", describe(target_),
                 path, outcome.message());
  }
}

void CheckpointUploader::delete_from_bucket(const std::string& path) {
  const Status s = store_.delete_object(object_key(target_, path));
  std::lock_guard<std::mutex> lock(mu_);
  if (s.ok()) {
    ++deleted_;
    in_bucket_.erase(path);
  } else {
    spdlog::warn("--sync {}: cannot delete {} from the bucket: {}", describe(target_), path, s.message());
    delete_failures_.push_back(path + ": " + s.message());
  }
}

bool CheckpointUploader::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.idle();
}

SyncReport CheckpointUploader::report() const {
  std::lock_guard<std::mutex> lock(mu_);
  SyncReport r = queue_.report();
  r.send_seconds = send_seconds_;
  r.deleted = deleted_;
  r.delete_failures = delete_failures_;
  return r;
}

}  // namespace ddp
