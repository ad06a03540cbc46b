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
// Registered buffers (register_buffer): memory every rank maps, so an
// all-reduce of data inside it needs no copies into the slots at all.
//
// Threading: one op at a time per instance (the Gloo backend thread);
// register_buffer counts as an op.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ddp/common/store.h"
#include "shm_barrier.h"

namespace ddp {

enum class ShmDtype { kFloat32, kFloat64, kInt32, kInt64, kInt8, kUint8 };

/// out[i] = in[0][i] + in[1][i] + ... in rank order (then / n when average):
/// the sums SharedMemoryAllreduce::all_reduce makes, bit for bit, so a path
/// that gathers every rank's data can give the same results. out must not
/// alias an input. Pure; any thread.
void sum_in_rank_order(ShmDtype dtype, void* out, const std::vector<const void*>& in, size_t count, bool average,
                       int n);

class SharedMemoryAllreduce {
 public:
  /// Collective over `store` (use a key space of this communicator's own).
  /// Returns nullptr on every rank alike when shared memory cannot serve this
  /// group; why goes to *reason when given, and *on_one_host (when given)
  /// says whether it failed although the group is 2 or more ranks on one host
  /// (/dev/shm full or unusable), the case worth a warning. Throws StoreError
  /// when the store itself fails.
  static std::unique_ptr<SharedMemoryAllreduce> connect(Store& store, int rank, int size,
                                                        std::chrono::milliseconds timeout,
                                                        std::string* reason = nullptr,
                                                        bool* on_one_host = nullptr);
  ~SharedMemoryAllreduce();
  SharedMemoryAllreduce(const SharedMemoryAllreduce&) = delete;
  SharedMemoryAllreduce& operator=(const SharedMemoryAllreduce&) = delete;

  /// In place: data[0..count) becomes the sum (average: sum / size) over ranks.
  /// Throws ShmBarrierError when a peer died, aborted or the timeout passed.
  /// When every rank's data lies at the same offset of the same registered
  /// buffer, the ranks read each other's buffers directly (rank r sums slice r
  /// in place, then copies the other slices from their owners): half the
  /// memory traffic of going through the slots, and no chunking.
  void all_reduce(void* data, size_t count, ShmDtype dtype, bool average);

  /// Collective (every rank, in the same order, with the same bytes): `bytes`
  /// of zeroed shared memory that every peer maps too, for data this group
  /// all-reduces again and again (the reducer's buckets). The memory stays
  /// mapped while the returned pointer or a copy of it lives, also after this
  /// object is gone. nullptr on every rank alike when some rank could not
  /// create or map its buffer, or when it would take more than half of what
  /// /dev/shm has left on some rank: use ordinary memory then.
  std::shared_ptr<void> register_buffer(size_t bytes);

  /// Bytes of one slot (the chunk size).
  size_t slot_bytes() const { return slot_bytes_; }
  /// How many all_reduce calls so far reduced a registered buffer in place.
  uint64_t in_place_ops() const { return in_place_ops_; }

 private:
  SharedMemoryAllreduce(void* base, size_t length, int rank, int size, size_t slot_bytes,
                        std::chrono::milliseconds timeout);
  struct Registered;  // one registered buffer: this rank's mapping and its peers'
  unsigned char* slot(int set, int rank) const;
  unsigned char* result(int set) const;
  /// The registered buffer holding [data, data + bytes), or null.
  std::shared_ptr<Registered> find_registered(const void* data, size_t bytes);
  void reduce_registered(const Registered& buffer, size_t offset, size_t count, ShmDtype dtype, bool average);
  void reduce_through_slots(unsigned char* bytes, size_t count, ShmDtype dtype, bool average, bool first_chunk_in);

  void* base_;
  size_t length_;
  int rank_;
  int size_;
  size_t slot_bytes_;
  std::chrono::milliseconds timeout_;
  ShmBarrier barrier_;
  int parity_ = 0;  // which slot set the next chunk uses; advances identically on every rank
  int op_parity_ = 0;  // which descriptor set the next all_reduce uses; likewise
  uint64_t next_buffer_id_ = 1;  // registrations happen in the same order on every rank
  uint64_t in_place_ops_ = 0;
  std::vector<std::weak_ptr<Registered>> registered_;
};

}  // namespace ddp
