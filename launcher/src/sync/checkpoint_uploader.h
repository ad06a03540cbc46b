#pragma once
// `--sync DIR=s3://BUCKET/PREFIX` while the job runs: every file finished in
// DIR (directory_watch.h) goes to the bucket once it has settled, retried
// with backoff when the bucket fails (upload_queue.h). Files present before
// the watch started are not sent again.
//
// Threading: run_once() and the watch belong to one thread (the agent's
// uploader thread); report() may be called from any thread.

#include <mutex>
#include <optional>

#include "sync/directory_watch.h"
#include "sync/object_store.h"
#include "sync/sync_target.h"
#include "sync/upload_queue.h"

namespace ddp {

class CheckpointUploader {
 public:
  /// Starts watching target.dir (created when missing). Throws
  /// std::system_error when it cannot be watched.
  CheckpointUploader(SyncTarget target, ObjectStore& store, const Clock& clock, UploadPolicy policy = {});

  /// Takes in what the folder reported, then sends every file due now, one
  /// after another on the calling thread. Returns when the next falls due
  /// (nullopt: nothing pending; wait for the watch's fd).
  std::optional<SteadyTime> run_once();
  /// The watch's descriptor: readable when files changed.
  int watch_fd() const { return watch_.fd(); }
  bool idle() const;
  SyncReport report() const;
  const SyncTarget& target() const { return target_; }

 private:
  SyncTarget target_;
  ObjectStore& store_;
  DirectoryWatch watch_;
  mutable std::mutex mu_;  // guards queue_ (report() from other threads)
  UploadQueue queue_;
};

}  // namespace ddp
