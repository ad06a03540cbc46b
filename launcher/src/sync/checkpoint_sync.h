#pragma once
// `--sync` for one agent, from the job's start to its end:
//  - at start, every node fills each DIR that is missing or empty from its
//    bucket prefix, so a job started on a fresh machine resumes from the last
//    checkpoint (the trainer's own checks still decide what is valid);
//  - on the node that uploads (node 0), a background thread runs one
//    CheckpointUploader per DIR while the job runs;
//  - at the end, finish() waits up to a bound for what is still pending and
//    returns the report that goes into the summary and failure.json.
// The bucket never blocks or fails the job: every failure is a warning.
//
// Threading: the constructor, download_missing(), start_uploads() and
// finish() are called from the agent's main thread; the uploads run on the
// thread start_uploads() starts; state_json() may be called from any thread
// (the coordinator's status RPC).

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/common/clock.h"
#include "sync/checkpoint_uploader.h"
#include "sync/object_store.h"
#include "sync/sync_target.h"

namespace ddp {

class CheckpointSync {
 public:
  /// The bucket of a target; null when it cannot be reached at all (no
  /// credentials: the factory says why once), and that target is skipped.
  using StoreFactory = std::function<std::unique_ptr<ObjectStore>(const SyncTarget&)>;

  /// `state_file`: where the live state is kept for `ddplaunch list` (empty: nowhere).
  CheckpointSync(SyncSettings settings, StoreFactory make_store, std::string state_file = {},
                 UploadPolicy policy = {});
  ~CheckpointSync();  // stops the uploads at once if finish() was not called
  CheckpointSync(const CheckpointSync&) = delete;
  CheckpointSync& operator=(const CheckpointSync&) = delete;

  /// Each DIR missing or without files whose prefix holds objects is
  /// downloaded (each file written beside its place and renamed in).
  void download_missing();
  /// Starts watching every DIR and uploading what is finished in it.
  void start_uploads();
  /// Waits up to `bound` for the uploads still pending, stops, and returns
  /// the report: {"targets": [{"target", "dir", uploaded, pending, ...}]}.
  /// Null JSON when this agent does not upload. When `interrupt_fd` (e.g. a
  /// signalfd of the stop signals) becomes readable, it stops waiting once
  /// the file in flight is sent (a user's second Ctrl-C).
  nlohmann::json finish(Duration bound, int interrupt_fd = -1);
  /// One line per target, for the console and the job's summary.
  std::string summary() const;
  /// The live state, in finish()'s form; null when this agent does not upload.
  nlohmann::json state_json() const;

 private:
  struct Target {
    SyncTarget target;
    std::unique_ptr<ObjectStore> store;
    std::unique_ptr<CheckpointUploader> uploader;
  };
  void upload_loop();
  void wake();
  void write_state_file(std::string* last_written) const;

  SyncSettings settings_;
  std::string state_file_;
  UploadPolicy policy_;
  std::vector<Target> targets_;
  std::thread thread_;
  int wakeup_fd_ = -1;
  int done_fd_ = -1;  // written when the uploads' thread returns
  std::atomic<bool> finishing_{false};
  std::atomic<bool> stop_now_{false};
  std::mutex deadline_mutex_;
  SteadyTime finish_deadline_{};  // under deadline_mutex_
};

}  // namespace ddp
