#pragma once
// What the checkpoint uploader of `--sync` still has to send, and when.
//
// Files are reported as they finish (closed after writing, or renamed into
// place). A file is sent only once it has been quiet for `settle`: a temp
// file that torch.save or ddptrain renames into place within that time is
// dropped when the rename reports it gone, so it is never sent, and a file
// rewritten meanwhile is sent once, as it ended. A failed attempt is retried
// with exponential backoff (the bucket never blocks or fails the job); the
// report says what was sent, what keeps failing and why, and what waits.
//
// Threading: one owner thread (the uploader's); time comes from the Clock.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ddp/common/clock.h"
#include "ddp/common/status.h"

namespace ddp {

struct UploadPolicy {
  Duration settle = std::chrono::seconds(1);
  Duration first_retry = std::chrono::seconds(1);
  Duration max_retry = std::chrono::seconds(60);
};

struct SyncReport {
  int uploaded = 0;
  int64_t uploaded_bytes = 0;
  int pending = 0;  // waiting to settle, due, or waiting for a retry
  struct Failing {
    std::string path;
    int attempts = 0;
    std::string last_error;
  };
  std::vector<Failing> failing;       // pending files whose last attempt failed
  std::vector<std::string> waiting;   // pending files not tried yet (settling, or due)
  double send_seconds = 0;            // time spent sending, for the throughput
  int deleted = 0;                    // --sync-delete: objects deleted
  std::vector<std::string> delete_failures;  // "path: why"
  nlohmann::json to_json() const;
  /// "12 file(s) uploaded (1.2 GiB), 1 pending: model.pt (3 attempts: ...)"
  std::string summary() const;
};

class UploadQueue {
 public:
  UploadQueue(const Clock& clock, UploadPolicy policy);

  /// relative_path finished writing (again): due once it has settled.
  void file_ready(const std::string& relative_path);
  /// relative_path was renamed away or deleted: nothing to send for it.
  void file_gone(const std::string& relative_path);

  /// The path to send now, if one is due; it stays pending until done().
  std::optional<std::string> next_due();
  /// When the next pending file falls due; nullopt when none is pending.
  std::optional<SteadyTime> next_due_time() const;
  /// The outcome of sending relative_path (`bytes` sent when ok). A file
  /// reported ready again while it was being sent is sent again; one gone
  /// meanwhile, or whose send says kNotFound (the local file is no more), is
  /// dropped.
  void done(const std::string& relative_path, const Status& outcome, int64_t bytes);

  bool idle() const { return pending_.empty(); }
  SyncReport report() const;

 private:
  struct Pending {
    SteadyTime due;
    int attempts = 0;
    std::string last_error;
    bool sending = false;
    bool changed_while_sending = false;
    bool gone_while_sending = false;
  };
  Duration backoff(int attempts) const;

  const Clock& clock_;
  UploadPolicy policy_;
  std::map<std::string, Pending> pending_;
  int uploaded_ = 0;
  int64_t uploaded_bytes_ = 0;
};

}  // namespace ddp
