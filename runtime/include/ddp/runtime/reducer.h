#pragma once
// Reducer: DDP's bucketed gradient all-reduce, overlapped with backward.
//
// How it works. Parameters are grouped into flat buckets (bucket_plan.h;
// reverse parameter order at first). A post-hook on every parameter's
// gradient accumulator (the autograd node that writes .grad) marks that
// parameter ready once its gradient has been accumulated: the gradient,
// multiplied by 1/world_size, is written into its slot of the bucket (the one
// division, fused into that copy). When a bucket's last gradient is ready and
// every earlier bucket has been launched, its all_reduce(SUM) is issued at
// once, tagged with the bucket index, while backward goes on. The first hook
// of a backward queues a callback that autograd runs when the backward ends:
// it waits for every bucket and copies the averaged gradients back into .grad
// (or, with gradient_as_bucket_view, .grad already is a view into its bucket
// and nothing is copied).
//
// After the first synchronized backward, buckets are rebuilt once in the order
// gradients actually became ready there; rank 0's order is broadcast so every
// rank builds the same layout.
//
// Misuse is reported by ReducerError thrown out of backward():
//  - a parameter got no gradient and find_unused_parameters is off (named);
//  - a parameter marked ready twice in one backward (e.g. a reentrant
//    backward reusing it);
//  - a backward (or, from prepare_for_forward, a forward) started while the
//    previous reduction had not finished: after one of the errors above, a
//    failed collective, or a backward that threw part-way. The reducer stays
//    in that state; build a new one (as PyTorch, there is no recovery).
// With find_unused_parameters, parameters that got no gradient in this
// backward are marked ready at its end: they contribute their current .grad
// (zero when undefined). One more small all_reduce (tag bucket -1) tells
// which parameters some rank used since the last reduction (no_sync steps
// included): a parameter used on any rank gets the averaged .grad; one that
// no rank used keeps its .grad undefined when it was (as PyTorch's DDP).
//
// No-sync accumulation: with set_require_sync(false) hooks do nothing, so
// .grad accumulates locally; the next backward with sync on reduces the sum.
// Two synchronized backwards in a row each reduce what .grad holds then, so
// .grad ends as the sum of both averages, as without DDP.
//
// Every rank must run the same sequence of synchronized backwards (each
// issues the same all_reduces in the same order); the errors above are
// raised on every rank alike when the ranks run the same model and code.
//
// Threading: the hooks and the end-of-backward callback run on autograd's
// thread (the caller's thread for CPU tensors); one backward at a time per
// reducer. The Collective is used only from that thread and, at construction
// and in rebuild, from the same.

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "ddp/runtime/bucket_plan.h"
#include "ddp/runtime/collective.h"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ddp {

class ReducerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// What is sent over the wire for each bucket.
enum class CommHook {
  kAllReduce,  // the bucket as is
  kFp16,       // compressed to float16, decompressed after
  kBf16,       // compressed to bfloat16, decompressed after
};

struct ReducerOptions {
  int64_t first_bucket_cap_bytes = int64_t{1} << 20;
  int64_t bucket_cap_bytes = int64_t{25} << 20;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  CommHook comm_hook = CommHook::kAllReduce;
  /// Rebuild buckets once in the observed ready order after the first backward.
  bool rebuild_buckets = true;
  /// Bound on waiting for one bucket's all-reduce at the end of backward.
  Duration timeout = std::chrono::minutes(30);
};

/// When the phases of one synchronized backward happened (steady clock), for
/// progress lines and traces. Each bucket's all-reduce start and end are in the
/// collective's flight record under its sequence number.
struct BackwardTiming {
  SteadyTime first_gradient{};  // the first gradient became ready
  SteadyTime backward_end{};    // autograd finished computing gradients
  SteadyTime reduced{};         // every bucket reduced and copied back
  std::vector<uint64_t> bucket_sequences;  // flight-record number of bucket i's all-reduce
};

class Reducer {
 public:
  /// params: leaf tensors that require grad (dense, one dtype/device each);
  /// names: one per parameter, for error messages (may be empty: "param #i").
  Reducer(std::vector<at::Tensor> params, std::vector<std::string> names, std::shared_ptr<Collective> collective,
          ReducerOptions options = {});
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  /// Called before each forward (DistributedDataParallel::prepare_forward
  /// does): throws ReducerError when the previous backward started reducing
  /// but never reached its end (it threw part-way), or a reduction failed.
  void prepare_for_forward();

  /// false: the next backwards only accumulate into .grad locally.
  void set_require_sync(bool require_sync);
  bool require_sync() const;

  /// The current layout (changes once, at the rebuild).
  std::vector<PlannedBucket> buckets() const;
  /// The flat bucket tensor of bucket i (with gradient_as_bucket_view, .grad
  /// of its parameters are views into it).
  at::Tensor bucket_tensor(size_t i) const;
  /// Synchronized backwards finished so far.
  int64_t iterations() const;
  /// Parameter indices in the order they became ready in the last finished
  /// synchronized backward (unused ones last).
  std::vector<int64_t> last_ready_order() const;
  bool buckets_rebuilt() const;
  /// The last finished synchronized backward's timing (all zero before one).
  BackwardTiming last_backward_timing() const;

  const std::vector<at::Tensor>& parameters() const { return params_; }
  const std::vector<std::string>& names() const { return names_; }
  const std::shared_ptr<Collective>& collective() const { return collective_; }

 private:
  struct Bucket;
  struct Slot {  // where parameter i lives
    size_t bucket = 0;
    size_t pos = 0;  // position inside the bucket
  };

  void build_buckets(const std::vector<int64_t>& order);
  at::Tensor bucket_view(size_t b, size_t pos) const;
  void autograd_hook(size_t index);
  void start_iteration_locked();
  void mark_ready_locked(size_t index);
  void launch_ready_buckets_locked();
  void finalize_backward();
  void finish_reduction_locked(const std::shared_ptr<Work>& used_work, const at::Tensor& used);
  void rebuild_locked();
  void fail_locked(const std::string& message);
  void wait_launched_quietly_locked();
  at::Device comm_device() const;  // where small control tensors go (the backend's device)

  std::vector<at::Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<Collective> collective_;
  ReducerOptions options_;
  double scale_ = 1.0;  // 1 / world size

  std::vector<std::shared_ptr<torch::autograd::Node>> grad_accumulators_;
  std::vector<uintptr_t> hook_keys_;

  mutable std::mutex mutex_;
  std::vector<PlannedBucket> plan_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<Slot> slots_;
  bool require_sync_ = true;
  bool in_backward_ = false;
  std::string failure_;  // set when a reduction did not finish; later backwards refuse
  std::vector<bool> ready_;
  std::vector<bool> used_since_sync_;  // got a gradient since the last reduction (no_sync steps too)
  std::vector<int64_t> ready_order_;
  std::vector<int64_t> last_ready_order_;
  size_t next_launch_ = 0;
  int64_t iterations_ = 0;
  bool rebuilt_ = false;
  BackwardTiming timing_;       // of the backward in progress
  BackwardTiming last_timing_;  // of the last finished one
};

}  // namespace ddp
