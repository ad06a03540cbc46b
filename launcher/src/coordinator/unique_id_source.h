#pragma once
// UniqueIdSource: where NCCL unique IDs come from. With NCCL present the
// coordinator calls ncclGetUniqueId (it needs no GPU; the calling process
// hosts NCCL's bootstrap root, which is why the coordinator, alive for the
// whole job, is the one to call it). NCCL is loaded at run time, so ddplaunch
// builds and runs without it; then IDs are random bytes of the same size,
// which is all a build without NCCL can use them for.
//
// Threading: create_id() may be called from any thread.

#include <memory>
#include <string>

namespace ddp {

class UniqueIdSource {
 public:
  virtual ~UniqueIdSource() = default;
  /// A fresh 128-byte ID.
  virtual std::string create_id() = 0;
  /// Where the IDs come from, for the start-up line.
  virtual std::string describe() const = 0;
};

/// ncclGetUniqueId through libnccl.so.2 when it loads, else random bytes.
std::unique_ptr<UniqueIdSource> make_unique_id_source();
/// Random bytes only (tests, and machines without NCCL).
std::unique_ptr<UniqueIdSource> make_random_id_source();

inline constexpr size_t kUniqueIdBytes = 128;  // sizeof(ncclUniqueId)

}  // namespace ddp
