#pragma once
// `--sync DIR=s3://BUCKET/PREFIX` while the job runs: every file finished in
// DIR (directory_watch.h) goes to the bucket once it has settled, retried
// with backoff when the bucket fails (upload_queue.h). Files present before
// the watch started are not sent again. With mirror_deletions, a file deleted
// from DIR that the bucket holds (present at start, or sent since) is deleted
// there too; a temp file renamed away was never sent, so it costs nothing.
//
// It logs one warning when sending starts to fail, and one line when it works
// again, not one per retry: a wrong key or a bucket that is down must not
// flood the console of a job that runs on regardless.
//
// Threading: run_once() and the watch belong to one thread (the agent's
// uploader thread); report() may be called from any thread.

#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "sync/directory_watch.h"
#include "sync/object_store.h"
#include "sync/sync_target.h"
#include "sync/upload_queue.h"

namespace ddp {

class CheckpointUploader {
 public:
  /// Starts watching target.dir (created when missing). Throws
  /// std::system_error when it cannot be watched.
  CheckpointUploader(SyncTarget target, ObjectStore& store, const Clock& clock, UploadPolicy policy = {},
                     bool mirror_deletions = false);

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
  void note_outcome(const std::string& path, const Status& outcome);
  void delete_from_bucket(const std::string& path);

  SyncTarget target_;
  ObjectStore& store_;
  const Clock& clock_;
  DirectoryWatch watch_;
  bool mirror_deletions_;
  std::set<std::string> in_bucket_;  // paths present at start or sent since (deletions mirrored)
  bool failing_ = false;             // the last send failed: warned once
  mutable std::mutex mu_;            // guards queue_ and the report's extras (report() from other threads)
  UploadQueue queue_;
  double send_seconds_ = 0;
  int deleted_ = 0;
  std::vector<std::string> delete_failures_;
};

}  // namespace ddp
