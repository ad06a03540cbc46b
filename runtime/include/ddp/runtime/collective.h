#pragma once
// Collective: the communication a data-parallel worker needs, on one
// communicator (all ranks of the job). Every call is asynchronous and returns
// a Work handle; calls run in the order they were made, on every rank alike
// (the same order on all ranks is the caller's duty, as with any MPI-style
// library). Backends: Gloo on CPU tensors, NCCL on CUDA tensors.
//
// Ownership: tensors passed in must stay alive and untouched until the Work
// completes. Threading: a Collective may be called from any one thread at a
// time (the training thread, or autograd's thread for the reducer); Work
// handles may be waited on from any thread.

#include <torch/types.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "ddp/common/clock.h"
#include "ddp/runtime/flight_recorder.h"

namespace ddp {

enum class ReduceOp { kSum, kAvg };

/// A collective that failed (a peer died, a timeout, a backend error); the
/// message says which collective and why.
class CollectiveError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Work {
 public:
  virtual ~Work() = default;
  /// Waits until the collective has ended. Returns false on timeout (it may
  /// still complete later); throws CollectiveError when it failed.
  virtual bool wait(Duration timeout = Duration::max()) = 0;
  virtual bool is_completed() const = 0;
  /// The failure, once ended with one; null otherwise.
  virtual std::exception_ptr error() const = 0;
  /// Its number in the communicator's flight record.
  virtual uint64_t sequence() const = 0;
};

/// Extra facts a caller can attach to a collective, for the flight record.
struct CollectiveTag {
  int bucket = -1;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "gloo" or "nccl".
  virtual std::string backend() const = 0;

  /// In place: tensor becomes the sum (or mean) over ranks.
  virtual std::shared_ptr<Work> all_reduce(at::Tensor tensor, ReduceOp op, CollectiveTag tag = {}) = 0;
  /// In place: tensor becomes root's tensor on every rank.
  virtual std::shared_ptr<Work> broadcast(at::Tensor tensor, int root) = 0;
  /// output (size() x input's elements, contiguous) gets every rank's input in rank order.
  virtual std::shared_ptr<Work> all_gather(at::Tensor input, at::Tensor output) = 0;
  virtual std::shared_ptr<Work> barrier() = 0;

  /// A zero-filled 1-D tensor for data this communicator will all_reduce
  /// again and again (the reducer's buckets). Collective: every rank calls it
  /// in the same order with the same numel and dtype, from the thread that
  /// issues its collectives. A backend that can reduce such memory more
  /// cheaply hands out its own (the Gloo backend on one host: shared memory
  /// the peers read in place); otherwise, and by default, an ordinary tensor.
  virtual at::Tensor new_reduction_buffer(int64_t numel, const at::TensorOptions& options) {
    return at::zeros({numel}, options);
  }

  virtual const FlightRecorder& flight_record() const = 0;
};

}  // namespace ddp
