#pragma once
// `ddplaunch doctor --sync DIR=s3://BUCKET/PREFIX`: are there credentials,
// does the bucket answer, and may this key list and write under the prefix?
// The write is a zero-byte probe object, deleted at once; no checkpoint is
// written.
//
// Threading: the caller's thread; each check makes at most a few requests.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "doctor/check_result.h"
#include "sync/aws_credentials.h"
#include "sync/object_store.h"
#include "sync/sync_target.h"

namespace ddp {

/// The bucket of a target, for these checks (tests give an in-memory one).
using SyncStoreFactory = std::function<std::unique_ptr<ObjectStore>(const AwsCredentials&, const SyncTarget&)>;

/// One "sync credentials" check, then one per target. `probe_name` is the
/// probe object's name below the prefix.
std::vector<CheckResult> sync_checks(const std::vector<SyncTarget>& targets, const AwsEnv& env,
                                     const SyncStoreFactory& make_store, const std::string& probe_name);

/// The same against the real buckets (S3ObjectStore, short timeouts).
std::vector<CheckResult> sync_checks(const std::vector<SyncTarget>& targets);

}  // namespace ddp
