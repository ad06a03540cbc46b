#pragma once
// `--sync DIR=s3://BUCKET/PREFIX`: a local folder whose finished files go to
// an S3-compatible bucket (AWS S3, Tencent COS, MinIO, Ceph RGW, GCS interop).
//
// Threading: plain values and free functions.

#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"

namespace ddp {

struct SyncTarget {
  std::string dir;     // the local folder, as given
  std::string bucket;  // S3 bucket name
  std::string prefix;  // key prefix: empty, or ends with '/'
};

/// What the launch options say about syncing (--sync, --sync-delete, --sync-wait).
struct SyncSettings {
  std::vector<SyncTarget> targets;  // empty: no sync
  bool mirror_deletions = false;    // a file deleted in DIR is deleted in the bucket
  Duration final_wait = std::chrono::seconds(300);  // at the job's end, for uploads still pending
};

/// Parses DIR=s3://BUCKET[/PREFIX]. nullopt with `why` (one clause naming
/// what is wrong) for a missing '=', an empty DIR, another scheme, or a bucket
/// name S3 does not allow (3-63 of a-z 0-9 . -, starting and ending with a
/// letter or digit).
std::optional<SyncTarget> parse_sync_target(const std::string& spec, std::string& why);

/// The object key of a file at `relative_path` (with '/' separators) in DIR.
std::string object_key(const SyncTarget& target, const std::string& relative_path);

/// "s3://BUCKET/PREFIX", for messages.
std::string describe(const SyncTarget& target);

}  // namespace ddp
