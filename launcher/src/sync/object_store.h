#pragma once
// The bucket `--sync` writes to, behind an interface: the S3 implementation
// speaks HTTP (SigV4-signed, through libcurl); unit tests use an in-memory one.
//
// Threading: an ObjectStore is used by one thread at a time (the uploader's).

#include <cstdint>
#include <string>

#include "ddp/common/status.h"

namespace ddp {

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  /// Uploads the local file as object `key` (a large one in parts). On
  /// success *bytes is its size. kNotFound means the local file is no more
  /// (nothing to retry); other errors carry the store's reason, without
  /// credentials.
  virtual Status put_file(const std::string& key, const std::string& local_path, int64_t* bytes) = 0;
};

}  // namespace ddp
