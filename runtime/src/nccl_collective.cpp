#include "ddp/runtime/nccl_collective.h"

#include <cuda_runtime_api.h>
#if defined(CUDART_VERSION) && CUDART_VERSION >= 11000
#include <cuda_bf16.h>  // older nccl.h declares ncclBfloat16 only when this was included
#endif
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <fmt/format.h>

// The caller's compute stream: LibTorch's current stream with a CUDA build of
// LibTorch (1.13 and 2.x alike), the legacy default stream otherwise. CMake
// defines DDP_TORCH_CUDA when LibTorch has c10_cuda (a CPU build may still
// ship the c10/cuda headers, unusable without it).
#if defined(DDP_TORCH_CUDA) && __has_include(<c10/cuda/CUDAStream.h>)
#include <c10/cuda/CUDAStream.h>
#define DDP_NCCL_HAVE_C10_CUDA 1
#else
#define DDP_NCCL_HAVE_C10_CUDA 0
#endif

// NCCL_VERSION() exists from NCCL 2.? on; the scheme changed at 2.9.
#ifndef NCCL_VERSION
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0)
#define DDP_NCCL_NONBLOCKING 1  // ncclConfig_t, ncclCommInitRankConfig, ncclCommFinalize
#else
#define DDP_NCCL_NONBLOCKING 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
#define DDP_NCCL_HAVE_LAST_ERROR 1
#else
#define DDP_NCCL_HAVE_LAST_ERROR 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0)
#define DDP_NCCL_HAVE_AVG 1
#else
#define DDP_NCCL_HAVE_AVG 0
#endif
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 10, 0) && defined(__CUDA_BF16_TYPES_EXIST__)
#define DDP_NCCL_HAVE_BF16 1
#else
#define DDP_NCCL_HAVE_BF16 0
#endif

namespace ddp {
namespace {

using std::chrono::steady_clock;

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(t);
  }
}

bool nccl_dtype(at::ScalarType t, ncclDataType_t* out) {
  switch (t) {
    case at::kFloat: *out = ncclFloat32; return true;
    case at::kDouble: *out = ncclFloat64; return true;
    case at::kHalf: *out = ncclFloat16; return true;
#if DDP_NCCL_HAVE_BF16
    case at::kBFloat16: *out = ncclBfloat16; return true;
#endif
    case at::kInt: *out = ncclInt32; return true;
    case at::kLong: *out = ncclInt64; return true;
    case at::kChar: *out = ncclInt8; return true;
    case at::kByte: *out = ncclUint8; return true;
    default: return false;
  }
}

SteadyTime now() { return SystemClock::instance().now(); }

SteadyTime deadline_after(Duration d) {
  const SteadyTime t = now();
  if (d >= SteadyTime::max() - t) return SteadyTime::max();
  return t + d;
}

std::string seconds_text(Duration d) {
  return fmt::format("{:g} s", std::chrono::duration_cast<std::chrono::milliseconds>(d).count() / 1000.0);
}

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string text = std::string(ncclGetErrorString(r)) + " (ncclResult " + std::to_string(static_cast<int>(r)) + ")";
#if DDP_NCCL_HAVE_LAST_ERROR
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += ": " + std::string(last);
#else
  (void)comm;
#endif
  return text;
}

std::string cuda_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) throw CollectiveError("nccl: " + what + " failed: CUDA error " + cuda_text(e));
}

/// Sets the current device for its scope and restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) cuda_check(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
  }
  ~DeviceGuard() {
    int current = -1;
    if (previous_ >= 0 && cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

cudaStream_t compute_stream(int device) {
#if DDP_NCCL_HAVE_C10_CUDA
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
#else
  (void)device;
  return cudaStreamLegacy;
#endif
}

/// Polls a non-blocking communicator until its pending call settles or the
/// deadline passes; returns ncclInProgress on timeout.
ncclResult_t settle(ncclComm_t comm, SteadyTime deadline) {
  ncclResult_t state = ncclSuccess;
  for (int spins = 0;; ++spins) {
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
#if DDP_NCCL_NONBLOCKING
    if (state != ncclInProgress) return state;
#else
    return state;
#endif
    if (now() >= deadline) return state;
    if (spins < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

class NcclWork;

/// What the collective, its Work handles and its watchdog share.
struct Shared {
  int rank = 0;
  int size = 1;
  int device = 0;
  Duration timeout{};
  FlightRecorder recorder;

  // Guarded by comm_mutex: every NCCL call on comm, and the abort.
  std::mutex comm_mutex;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  void* barrier_buf = nullptr;
  bool aborted = false;
  std::string broken;  // why the communicator is unusable; empty while healthy

  // Ops issued and not yet ended.
  std::mutex list_mutex;
  std::list<std::shared_ptr<NcclWork>> outstanding;

  explicit Shared(size_t capacity) : recorder(capacity) {}

  std::string describe(const std::string& op, uint64_t seq) const {
    return "nccl " + op + " #" + std::to_string(seq) + " (rank " + std::to_string(rank) + " of " +
           std::to_string(size) + ", cuda:" + std::to_string(device) + ")";
  }

  /// Aborts the communicator (once) and fails every outstanding op.
  void abort_all(const std::string& reason);
  /// Checks ncclCommGetAsyncError; aborts on an error. Returns false once broken.
  bool check_health();
  std::string broken_reason() {
    std::lock_guard<std::mutex> lock(comm_mutex);
    return broken.empty() ? std::string("the communicator was aborted") : broken;
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<Shared> shared, uint64_t sequence, std::string op, std::vector<at::Tensor> keep)
      : shared_(std::move(shared)), sequence_(sequence), op_(std::move(op)), keep_(std::move(keep)) {}

  ~NcclWork() override {
    // Destroying an event whose work is still queued is allowed: CUDA frees it
    // once the work has passed it.
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (end_ != nullptr) cudaEventDestroy(end_);
  }

  /// Creates the events (device must be current).
  void create_events() {
    cuda_check(cudaEventCreateWithFlags(&start_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventCreateWithFlags(&end_, cudaEventDisableTiming), "cudaEventCreate");
  }
  cudaEvent_t start_event() const { return start_; }
  cudaEvent_t end_event() const { return end_; }
  void set_deadline(SteadyTime t) { deadline_ = t; }
  SteadyTime deadline() const { return deadline_; }
  const std::string& op() const { return op_; }

  bool wait(Duration timeout) override {
    const SteadyTime until = deadline_after(timeout);
    for (int spins = 0;; ++spins) {
      if (poll()) break;
      if (!shared_->check_health()) {
        // Broken: abort_all failed every outstanding op; make sure of this one.
        if (!poll()) {
          finish(std::make_exception_ptr(CollectiveError(shared_->describe(op_, sequence_) + " failed: " +
                                                         shared_->broken_reason())));
        }
        continue;
      }
      if (now() >= deadline_) {
        shared_->abort_all(shared_->describe(op_, sequence_) + " did not end within " +
                           seconds_text(shared_->timeout) + "; the communicator was aborted");
        continue;
      }
      if (now() >= until) return false;
      if (spins < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(spins < 2000 ? 20 : 500));
      }
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  bool is_completed() const override { return const_cast<NcclWork*>(this)->poll(); }

  std::exception_ptr error() const override {
    const_cast<NcclWork*>(this)->poll();
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }

  uint64_t sequence() const override { return sequence_; }

  /// True once ended (completed or failed); records start and end in the
  /// flight record as the events are passed.
  bool poll() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_) return true;
      if (end_ == nullptr) return false;  // not issued yet
    }
    if (!started_.load()) {
      if (cudaEventQuery(start_) == cudaSuccess) mark_started();
    }
    const cudaError_t e = cudaEventQuery(end_);
    if (e == cudaErrorNotReady) return false;
    if (e == cudaSuccess) {
      finish(nullptr);
    } else {
      finish(std::make_exception_ptr(CollectiveError(shared_->describe(op_, sequence_) +
                                                     " failed: CUDA error " + cuda_text(e))));
    }
    return true;
  }

  /// Ends the op (first call wins); releases the tensors it kept alive.
  void finish(std::exception_ptr error) {
    std::vector<at::Tensor> release;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (done_) return;
      done_ = true;
      error_ = std::move(error);
      release.swap(keep_);
    }
    mark_started();
    shared_->recorder.mark_ended(sequence_, error_ == nullptr, now());
  }

 private:
  void mark_started() {
    if (!started_.exchange(true)) shared_->recorder.mark_started(sequence_, now());
  }

  const std::shared_ptr<Shared> shared_;
  const uint64_t sequence_;
  const std::string op_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t end_ = nullptr;
  SteadyTime deadline_ = SteadyTime::max();
  std::atomic<bool> started_{false};

  mutable std::mutex mutex_;
  bool done_ = false;
  std::exception_ptr error_;
  std::vector<at::Tensor> keep_;
};

void Shared::abort_all(const std::string& reason) {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(comm_mutex);
    if (!aborted) {
      aborted = true;
      if (broken.empty()) broken = reason;
      if (comm != nullptr) {
        int previous = -1;
        cudaGetDevice(&previous);
        cudaSetDevice(device);
        ncclCommAbort(comm);
        if (previous >= 0 && previous != device) cudaSetDevice(previous);
        comm = nullptr;
      }
    }
    why = broken;
  }
  std::list<std::shared_ptr<NcclWork>> failing;
  {
    std::lock_guard<std::mutex> lock(list_mutex);
    failing.swap(outstanding);
  }
  for (auto& w : failing) {
    if (w->poll()) continue;  // it ended before the abort
    w->finish(std::make_exception_ptr(
        CollectiveError(describe(w->op(), w->sequence()) + " failed: " + why)));
  }
}

bool Shared::check_health() {
  std::string failure;
  {
    std::lock_guard<std::mutex> lock(comm_mutex);
    if (aborted) return false;
    if (comm == nullptr) return true;
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    const ncclResult_t bad = r != ncclSuccess ? r : state;
    if (bad == ncclSuccess) return true;
#if DDP_NCCL_NONBLOCKING
    if (bad == ncclInProgress) return true;
#endif
    failure = "NCCL reported an asynchronous error: " + nccl_text(bad, comm) +
              " (a peer failed or the network broke); the communicator was aborted";
  }
  abort_all(failure);
  return false;
}

class NcclCollective final : public Collective {
 public:
  NcclCollective(const std::string& unique_id_bytes, int rank, int size, int device, NcclOptions options)
      : shared_(std::make_shared<Shared>(options.flight_record_capacity)) {
    if (size < 1 || rank < 0 || rank >= size) {
      throw CollectiveError("nccl: rank " + std::to_string(rank) + " is not within a world of " +
                            std::to_string(size));
    }
    if (unique_id_bytes.size() != NCCL_UNIQUE_ID_BYTES) {
      throw CollectiveError("nccl: the unique id has " + std::to_string(unique_id_bytes.size()) +
                            " bytes, expected " + std::to_string(NCCL_UNIQUE_ID_BYTES));
    }
    const int devices = cuda_device_count();
    if (device < 0 || device >= devices) {
      throw CollectiveError("nccl: CUDA device " + std::to_string(device) + " does not exist (this process sees " +
                            std::to_string(devices) + ")");
    }
    Shared& s = *shared_;
    s.rank = rank;
    s.size = size;
    s.device = device;
    s.timeout = options.timeout;

    DeviceGuard guard(device);
    try {
      cuda_check(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking), "cudaStreamCreate");
      cuda_check(cudaMalloc(&s.barrier_buf, sizeof(float)), "cudaMalloc (barrier buffer)");
      cuda_check(cudaMemset(s.barrier_buf, 0, sizeof(float)), "cudaMemset (barrier buffer)");
      create_comm(unique_id_bytes);
    } catch (...) {
      release_resources();
      throw;
    }
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCollective() override {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stopping_ = true;
    }
    watch_cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    try {
      shutdown();
    } catch (...) {
      // Destructors never throw; the communicator is aborted below at worst.
    }
    release_resources();
  }

  int rank() const override { return shared_->rank; }
  int size() const override { return shared_->size; }
  std::string backend() const override { return "nccl"; }
  const FlightRecorder& flight_record() const override { return shared_->recorder; }

  std::shared_ptr<Work> all_reduce(at::Tensor tensor, ReduceOp op, CollectiveTag tag) override {
    check_tensor("all_reduce", tensor);
    const at::ScalarType type = tensor.scalar_type();
    ncclDataType_t dtype{};
    if (!nccl_dtype(type, &dtype)) {
      throw CollectiveError("nccl all_reduce: dtype " + dtype_name(type) + " is not supported" +
                            (type == at::kBFloat16 ? " by this NCCL (bfloat16 needs NCCL 2.10 and CUDA 11)" : ""));
    }
    if (op == ReduceOp::kAvg && !at::isFloatingType(type)) {
      throw CollectiveError("nccl all_reduce: average needs a floating dtype, got " + dtype_name(type));
    }
    ncclRedOp_t red = ncclSum;
    bool pre_divide = false;
    if (op == ReduceOp::kAvg) {
#if DDP_NCCL_HAVE_AVG
      red = ncclAvg;
#else
      pre_divide = true;  // sum of x/n on the compute stream, before the ready event
#endif
    }
    const auto count = static_cast<size_t>(tensor.numel());
    void* data = tensor.data_ptr();
    return issue("all_reduce", bytes_of(tensor), dtype_name(type), tag.bucket, {tensor}, true,
                 [=](ncclComm_t comm, cudaStream_t stream) {
                   return ncclAllReduce(data, data, count, dtype, red, comm, stream);
                 },
                 count == 0, pre_divide ? tensor : at::Tensor());
  }

  std::shared_ptr<Work> broadcast(at::Tensor tensor, int root) override {
    check_tensor("broadcast", tensor);
    if (root < 0 || root >= shared_->size) {
      throw CollectiveError("nccl broadcast: root " + std::to_string(root) + " is not within a world of " +
                            std::to_string(shared_->size));
    }
    const auto bytes = static_cast<size_t>(bytes_of(tensor));
    void* data = tensor.data_ptr();
    return issue("broadcast", bytes_of(tensor), dtype_name(tensor.scalar_type()), -1, {tensor}, true,
                 [=](ncclComm_t comm, cudaStream_t stream) {
                   return ncclBroadcast(data, data, bytes, ncclInt8, root, comm, stream);
                 },
                 bytes == 0);
  }

  std::shared_ptr<Work> all_gather(at::Tensor input, at::Tensor output) override {
    check_tensor("all_gather", input);
    check_tensor("all_gather", output);
    if (input.scalar_type() != output.scalar_type()) {
      throw CollectiveError("nccl all_gather: output dtype " + dtype_name(output.scalar_type()) +
                            " differs from input dtype " + dtype_name(input.scalar_type()));
    }
    if (output.numel() != input.numel() * shared_->size) {
      throw CollectiveError("nccl all_gather: output has " + std::to_string(output.numel()) +
                            " elements, expected " + std::to_string(shared_->size) + " x " +
                            std::to_string(input.numel()));
    }
    const auto in_bytes = static_cast<size_t>(bytes_of(input));
    const void* in = input.data_ptr();
    void* out = output.data_ptr();
    return issue("all_gather", bytes_of(output), dtype_name(input.scalar_type()), -1, {input, output}, true,
                 [=](ncclComm_t comm, cudaStream_t stream) {
                   return ncclAllGather(in, out, in_bytes, ncclInt8, comm, stream);
                 },
                 in_bytes == 0);
  }

  std::shared_ptr<Work> barrier() override {
    void* buf = shared_->barrier_buf;
    return issue("barrier", 0, "", -1, {}, false, [=](ncclComm_t comm, cudaStream_t stream) {
      return ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, stream);
    });
  }

 private:
  template <typename Call>
  std::shared_ptr<Work> issue(const std::string& name, int64_t bytes, std::string dtype, int bucket,
                              std::vector<at::Tensor> keep, bool after_compute, Call call, bool empty = false,
                              at::Tensor pre_divide = at::Tensor()) {
    Shared& s = *shared_;
    std::string abort_reason;
    std::shared_ptr<Work> result = issue_locked(name, bytes, std::move(dtype), bucket, std::move(keep), after_compute,
                                                call, empty, std::move(pre_divide), &abort_reason);
    // NCCL itself failed: the communicator cannot be trusted; abort it and
    // fail whatever else is outstanding.
    if (!abort_reason.empty()) s.abort_all(abort_reason);
    watch_cv_.notify_all();
    return result;
  }

  template <typename Call>
  std::shared_ptr<Work> issue_locked(const std::string& name, int64_t bytes, std::string dtype, int bucket,
                                     std::vector<at::Tensor> keep, bool after_compute, Call& call, bool empty,
                                     at::Tensor pre_divide, std::string* abort_reason) {
    Shared& s = *shared_;
    std::lock_guard<std::mutex> lock(s.comm_mutex);
    const uint64_t seq = s.recorder.enqueue(name, bytes, std::move(dtype), bucket, now());
    auto work = std::make_shared<NcclWork>(shared_, seq, name, std::move(keep));
    if (s.aborted) {
      work->finish(std::make_exception_ptr(
          CollectiveError(s.describe(name, seq) + " not run: the communicator failed earlier: " + s.broken)));
      return work;
    }
    // From here every failure is the op's, reported through its Work; the
    // communicator is aborted when NCCL itself failed (it cannot be trusted).
    std::string failure;
    bool abort = false;
    try {
      DeviceGuard guard(s.device);
      work->create_events();
      if (pre_divide.defined()) pre_divide.div_(s.size);
      if (after_compute) {
        cudaEvent_t ready = nullptr;
        cuda_check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
        cudaError_t e = cudaEventRecord(ready, compute_stream(s.device));
        if (e == cudaSuccess) e = cudaStreamWaitEvent(s.stream, ready, 0);
        cudaEventDestroy(ready);  // released once the stream has passed it
        cuda_check(e, "ordering after the compute stream");
      }
      cuda_check(cudaEventRecord(work->start_event(), s.stream), "cudaEventRecord");
      if (!empty) {
        const ncclResult_t r = call(s.comm, s.stream);
        ncclResult_t state = r;
#if DDP_NCCL_NONBLOCKING
        if (r == ncclInProgress) state = settle(s.comm, deadline_after(s.timeout));
#endif
        if (state != ncclSuccess) {
          abort = true;
          failure = state == ncclInProgress ? "NCCL did not accept the call within " + seconds_text(s.timeout)
                                            : "NCCL error " + nccl_text(state, s.comm);
        }
      }
      if (failure.empty()) cuda_check(cudaEventRecord(work->end_event(), s.stream), "cudaEventRecord");
    } catch (const std::exception& e) {
      failure = e.what();
    }
    if (!failure.empty()) {
      if (abort) *abort_reason = s.describe(name, seq) + " failed: " + failure;
      work->finish(std::make_exception_ptr(CollectiveError(s.describe(name, seq) + " failed: " + failure)));
      return work;
    }
    work->set_deadline(deadline_after(s.timeout));
    {
      std::lock_guard<std::mutex> list_lock(s.list_mutex);
      s.outstanding.push_back(work);
    }
    return work;
  }

  static int64_t bytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

  void check_tensor(const char* op, const at::Tensor& t) const {
    if (!t.defined()) throw CollectiveError(std::string("nccl ") + op + ": undefined tensor");
    const int device = shared_->device;
    if (!t.device().is_cuda() || t.device().index() != device) {
      throw CollectiveError(std::string("nccl ") + op + ": tensor is on " + t.device().str() +
                            "; this NCCL communicator takes CUDA tensors on cuda:" + std::to_string(device) +
                            " only");
    }
    if (!t.is_contiguous()) {
      throw CollectiveError(std::string("nccl ") + op + ": the tensor on " + t.device().str() +
                            " is not contiguous; pass tensor.contiguous() and copy back");
    }
  }

  void create_comm(const std::string& id_bytes) {
    Shared& s = *shared_;
    ncclUniqueId id;
    std::memcpy(id.internal, id_bytes.data(), NCCL_UNIQUE_ID_BYTES);
    const std::string who = "rank " + std::to_string(s.rank) + " of " + std::to_string(s.size) + " on cuda:" +
                            std::to_string(s.device);
    ncclComm_t comm = nullptr;
#if DDP_NCCL_NONBLOCKING
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const SteadyTime deadline = deadline_after(s.timeout);
    ncclResult_t r = ncclCommInitRankConfig(&comm, s.size, id, s.rank, &config);
    if (r == ncclSuccess || r == ncclInProgress) {
      if (comm == nullptr) throw CollectiveError("nccl: communicator creation (" + who + ") returned no communicator");
      r = settle(comm, deadline);
    }
    if (r != ncclSuccess) {
      const std::string text = r == ncclInProgress
                                   ? "not every rank joined within " + seconds_text(s.timeout)
                                   : nccl_text(r, comm);
      if (comm != nullptr) ncclCommAbort(comm);
      throw CollectiveError("nccl: communicator creation (" + who + ") failed: " + text);
    }
#else
    // NCCL before 2.14 has no non-blocking creation: this blocks until every rank joined.
    const ncclResult_t r = ncclCommInitRank(&comm, s.size, id, s.rank);
    if (r != ncclSuccess) {
      throw CollectiveError("nccl: communicator creation (" + who + ") failed: " + nccl_text(r, comm));
    }
#endif
    s.comm = comm;
  }

  /// Lets outstanding ops end (bounded by their deadlines), then frees the
  /// communicator, or aborts it when it cannot end cleanly.
  void shutdown() {
    Shared& s = *shared_;
    for (;;) {
      std::shared_ptr<NcclWork> pending;
      {
        std::lock_guard<std::mutex> lock(s.list_mutex);
        while (!s.outstanding.empty() && s.outstanding.front()->poll()) s.outstanding.pop_front();
        if (!s.outstanding.empty()) pending = s.outstanding.front();
      }
      if (!pending) break;
      try {
        pending->wait(Duration::max());  // aborts the communicator at the op's deadline
      } catch (const std::exception&) {
        // The op failed; abort_all has cleaned up.
      }
      std::lock_guard<std::mutex> lock(s.list_mutex);
      s.outstanding.remove(pending);
    }
    std::lock_guard<std::mutex> lock(s.comm_mutex);
    if (s.comm == nullptr) return;
    DeviceGuard guard(s.device);
    bool clean = true;
#if DDP_NCCL_NONBLOCKING
    ncclResult_t r = ncclCommFinalize(s.comm);
    if (r == ncclInProgress) r = settle(s.comm, deadline_after(s.timeout));
    clean = r == ncclSuccess;
#endif
    if (clean) {
      ncclCommDestroy(s.comm);
    } else {
      ncclCommAbort(s.comm);
    }
    s.comm = nullptr;
    s.aborted = true;
    if (s.broken.empty()) s.broken = "the communicator was destroyed";
  }

  void release_resources() {
    Shared& s = *shared_;
    std::lock_guard<std::mutex> lock(s.comm_mutex);
    int previous = -1;
    cudaGetDevice(&previous);
    cudaSetDevice(s.device);
    if (s.comm != nullptr) {
      ncclCommAbort(s.comm);
      s.comm = nullptr;
      s.aborted = true;
    }
    if (s.barrier_buf != nullptr) {
      cudaFree(s.barrier_buf);
      s.barrier_buf = nullptr;
    }
    if (s.stream != nullptr) {
      cudaStreamDestroy(s.stream);
      s.stream = nullptr;
    }
    if (previous >= 0 && previous != s.device) cudaSetDevice(previous);
  }

  /// The watchdog: notes ends in the flight record, releases finished ops'
  /// tensors, and aborts on an async NCCL error or an op past its deadline.
  void watch() {
    Shared& s = *shared_;
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!stopping_) {
      lock.unlock();
      bool any = false;
      std::shared_ptr<NcclWork> overdue;
      {
        std::lock_guard<std::mutex> list_lock(s.list_mutex);
        for (auto it = s.outstanding.begin(); it != s.outstanding.end();) {
          if ((*it)->poll()) {
            it = s.outstanding.erase(it);
            continue;
          }
          if (!overdue && now() >= (*it)->deadline()) overdue = *it;
          ++it;
        }
        any = !s.outstanding.empty();
      }
      if (overdue) {
        s.abort_all(s.describe(overdue->op(), overdue->sequence()) + " did not end within " +
                    seconds_text(s.timeout) + "; the communicator was aborted");
      } else if (any) {
        s.check_health();
      }
      lock.lock();
      watch_cv_.wait_for(lock, any ? std::chrono::milliseconds(5) : std::chrono::milliseconds(200));
    }
  }

  std::shared_ptr<Shared> shared_;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Collective> make_nccl_collective(const std::string& unique_id_bytes, int rank, int size, int device,
                                                 NcclOptions options) {
  return std::make_unique<NcclCollective>(unique_id_bytes, rank, size, device, std::move(options));
}

std::string nccl_new_unique_id() {
  ncclUniqueId id;
  const ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) throw CollectiveError("nccl: ncclGetUniqueId failed: " + nccl_text(r, nullptr));
  return std::string(id.internal, NCCL_UNIQUE_ID_BYTES);
}

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // 2.9 and later: X*10000 + Y*100 + Z; before: X*1000 + Y*100 + Z.
  const int major = v >= 10000 ? v / 10000 : v / 1000;
  const int minor = v >= 10000 ? (v / 100) % 100 : (v / 100) % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(v % 100);
}

}  // namespace ddp
