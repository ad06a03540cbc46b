#pragma once
// SharedMemoryAllreduce: all-reduce among the ranks of one host through one
// shared memory segment, instead of loopback TCP (the technique of NCCL's SHM
// transport and of MPI's intra-node collectives). The Gloo backend uses it for
// all_reduce when every rank of the communicator is on the same host; other
// collectives, and groups that span hosts, stay on Gloo's TCP pairs.
//
// Per chunk of at most slot_bytes: each rank copies its chunk into its own
// slot; barrier; then, for up to 4 ranks, every rank sums the whole chunk of
// every slot into its own tensor; for more, rank r sums slice r into the
// result area, barrier, and every rank copies the whole result back. Sums run
// in rank order, so the result is bitwise identical on every rank. Two sets of
// slots alternate, so a slot is rewritten only after every rank has passed
// the barrier that follows its last reader.
//
// Setup (connect) is collective and blocking: every rank publishes its host
// identity (host name, boot id, mount namespace) in the store; when they all
// match, rank 0 creates the segment (shm_open, space reserved with
// posix_fallocate so a full /dev/shm is an error here, not a SIGBUS later),
// the others map it and say so, and rank 0 unlinks its name once all have it
// mapped, so nothing is left behind in /dev/shm even if the job is killed.
// Every rank reaches the same answer: a group, or nullptr (not one host, or
// /dev/shm unusable on some rank) and the caller falls back to TCP.
//
// Threading: one op at a time per instance (the Gloo backend thread).

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "ddp/common/store.h"
#include "shm_barrier.h"

namespace ddp {

enum class ShmDtype { kFloat32, kFloat64, kInt32, kInt64, kInt8, kUint8 };

class SharedMemoryAllreduce {
 public:
  /// Collective over `store` (use a key space of this communicator's own).
  /// Returns nullptr on every rank alike when shared memory cannot serve this
  /// group; why goes to *reason when given. Throws StoreError when the store
  /// itself fails.
  static std::unique_ptr<SharedMemoryAllreduce> connect(Store& store, int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        std::string* reason = nullptr);
  ~SharedMemoryAllreduce();
  SharedMemoryAllreduce(const SharedMemoryAllreduce&) = delete;
  SharedMemoryAllreduce& operator=(const SharedMemoryAllreduce&) = delete;

  /// In place: data[0..count) becomes the sum (average: sum / size) over ranks.
  /// Throws ShmBarrierError when a peer died, aborted or the timeout passed.
  void all_reduce(void* data, size_t count, ShmDtype dtype, bool average);

  /// Bytes of one slot (the chunk size).
  size_t slot_bytes() const { return slot_bytes_; }

 private:
  SharedMemoryAllreduce(void* base, size_t length, int rank, int size, size_t slot_bytes,
                        std::chrono::milliseconds timeout);
  unsigned char* slot(int set, int rank) const;
  unsigned char* result(int set) const;

  void* base_;
  size_t length_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  std::chrono::milliseconds timeout_;
  ShmBarrier barrier_;
  int parity_ = 0;  // which slot set the next chunk uses; advances identically on every rank
};

}  // namespace ddp
