#pragma once
// The bucket `--sync` works with, behind an interface: the S3 implementation
// (sync/s3_store.h) speaks HTTP, SigV4-signed through libcurl; unit tests use
// an in-memory one.
//
// Threading: an ObjectStore is used by one thread at a time (the uploader's,
// or the agent's main thread for the download at start and `doctor --sync`).

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/common/status.h"

namespace ddp {

struct StoredObject {
  std::string key;
  int64_t size = 0;
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  /// Uploads the local file as object `key` (a large one in parts). On
  /// success *bytes is its size. kNotFound means the local file is no more
  /// (nothing to retry); other errors carry the store's reason, without
  /// credentials.
  virtual Status put_file(const std::string& key, const std::string& local_path, int64_t* bytes) = 0;
  /// Deletes object `key`; deleting a missing object is a success.
  virtual Status delete_object(const std::string& key) = 0;
  /// The objects whose key starts with `prefix`, in key order, at most
  /// `limit` of them (0: all, page after page).
  virtual Status list_objects(const std::string& prefix, size_t limit, std::vector<StoredObject>* out) = 0;
  /// Downloads object `key` into local_path: written to a temp name beside it
  /// and renamed into place when complete. On success *bytes is its size.
  virtual Status get_file(const std::string& key, const std::string& local_path, int64_t* bytes) = 0;
};

}  // namespace ddp
