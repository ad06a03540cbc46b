#include "ddp/runtime/gloo_collective.h"

#include "ddp/runtime/completion_work.h"

#include <cstdio>
#include <net/if.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <ATen/ATen.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/attr.h>
#include <gloo/transport/tcp/device.h>

#include "gloo_store_adapter.h"
#include "shared_memory_allreduce.h"

namespace ddp {
namespace {

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

std::chrono::milliseconds to_ms(Duration d) {
  const auto cap = std::chrono::hours(24 * 365);
  if (d > cap) return std::chrono::duration_cast<std::chrono::milliseconds>(cap);
  return std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(d));
}

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

template <typename T>
void gloo_allreduce_sum(const std::shared_ptr<gloo::Context>& ctx, void* data, size_t n, uint32_t tag,
                        std::chrono::milliseconds timeout) {
  gloo::AllreduceOptions opts(ctx);
  opts.setOutput<T>(static_cast<T*>(data), n);
  opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<T>));
  opts.setTag(tag);
  opts.setTimeout(timeout);
  gloo::allreduce(opts);
}

// The dtypes the shared-memory path sums natively; none for the others.
std::optional<ShmDtype> shm_dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ShmDtype::kFloat32;
    case at::kDouble: return ShmDtype::kFloat64;
    case at::kInt: return ShmDtype::kInt32;
    case at::kLong: return ShmDtype::kInt64;
    case at::kChar: return ShmDtype::kInt8;
    case at::kByte: return ShmDtype::kUint8;
    default: return std::nullopt;
  }
}

ShmDtype shm_dtype(at::ScalarType t) {
  if (const auto d = shm_dtype_of(t)) return *d;
  throw CollectiveError("unsupported dtype " + dtype_name(t));
}

bool reducible(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16:
    case at::kInt: case at::kLong: case at::kChar: case at::kByte:
      return true;
    default:
      return false;
  }
}

class GlooCollective final : public Collective {
 public:
  GlooCollective(std::shared_ptr<Store> store, int rank, int size, GlooOptions options)
      : rank_(rank), size_(size), options_(std::move(options)), timeout_(to_ms(options_.timeout)),
        recorder_(options_.flight_record_capacity) {
    if (size < 1 || rank < 0 || rank >= size) {
      throw CollectiveError("gloo: rank " + std::to_string(rank) + " is not within a world of " +
                            std::to_string(size));
    }
    if (!store) throw CollectiveError("gloo: no store given for the rendezvous");
    sum_in_rank_order_ = options_.sum_in_rank_order;
    try {
      gloo::transport::tcp::attr attr;
      const std::string& where = options_.interface_or_host;
      if (!where.empty() && if_nametoindex(where.c_str()) != 0) {
        attr.iface = where;
      } else {
        attr.hostname = where.empty() ? std::string("127.0.0.1") : where;
      }
      device_ = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(timeout_);
      GlooStoreAdapter adapter(store, options_.timeout);
      context->connectFullMesh(adapter, device_);
      context_ = std::move(context);
      if (options_.shared_memory) {
        bool on_one_host = false;
        shm_ = SharedMemoryAllreduce::connect(*store, rank, size, timeout_, &shm_unused_reason_, &on_one_host);
        // Summed in the shared-memory path's order, so that the results do
        // not depend on whether /dev/shm had room (a job that restarts after
        // filling it resumes bitwise equal).
        if (!shm_ && on_one_host) sum_in_rank_order_ = true;
        if (!shm_ && on_one_host && rank == 0) {
          std::fprintf(stderr,
                       "ddp: warning: the shared-memory all-reduce is off (%s): all-reduces of these %d "
                       "ranks go over Gloo's TCP, gathered and summed in rank order as the shared-memory path "
                       "sums (the same results, more slowly)\n",
                       shm_unused_reason_.c_str(), size);
        }
      }
    } catch (const std::exception& e) {
      throw CollectiveError("gloo rendezvous failed (rank " + std::to_string(rank) + " of " +
                            std::to_string(size) + ", bind '" + options_.interface_or_host +
                            "'): " + e.what());
    }
    thread_ = std::thread([this] { run(); });
  }

  ~GlooCollective() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    context_.reset();
    device_.reset();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "gloo"; }
  const FlightRecorder& flight_record() const override { return recorder_; }

  std::shared_ptr<Work> all_reduce(at::Tensor tensor, ReduceOp op, CollectiveTag tag) override {
    check_cpu("all_reduce", tensor);
    const at::ScalarType type = tensor.scalar_type();
    if (!reducible(type)) {
      throw CollectiveError("gloo all_reduce: dtype " + dtype_name(type) + " is not supported");
    }
    const bool floating = at::isFloatingType(type);
    if (op == ReduceOp::kAvg && !floating) {
      throw CollectiveError("gloo all_reduce: average needs a floating dtype, got " + dtype_name(type));
    }
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    return enqueue("all_reduce", bytes, dtype_name(type), tag.bucket, [this, tensor, op](uint32_t seq_tag) {
      if (tensor.numel() == 0) return;
      const at::ScalarType t = tensor.scalar_type();
      const bool upcast = t == at::kHalf || t == at::kBFloat16;
      at::Tensor buf;
      if (upcast) {
        buf = at::empty({tensor.numel()}, tensor.options().dtype(at::kFloat));
        buf.view(tensor.sizes()).copy_(tensor);
      } else {
        buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
      }
      if (shm_) {
        shm_->all_reduce(buf.data_ptr(), static_cast<size_t>(buf.numel()), shm_dtype(buf.scalar_type()), op == ReduceOp::kAvg);
      } else if (sum_in_rank_order_) {
        gather_and_sum_in_rank_order(buf, seq_tag, op == ReduceOp::kAvg);
      } else {
        reduce_over_tcp(buf, seq_tag);
        if (op == ReduceOp::kAvg) buf.div_(size_);
      }
      if (upcast) {
        tensor.copy_(buf.view(tensor.sizes()));
      } else if (!buf.is_same(tensor)) {
        tensor.copy_(buf);
      }
    });
  }

  std::shared_ptr<Work> broadcast(at::Tensor tensor, int root) override {
    check_cpu("broadcast", tensor);
    if (root < 0 || root >= size_) {
      throw CollectiveError("gloo broadcast: root " + std::to_string(root) + " is not within a world of " +
                            std::to_string(size_));
    }
    const int64_t bytes = tensor.numel() * static_cast<int64_t>(tensor.element_size());
    return enqueue("broadcast", bytes, dtype_name(tensor.scalar_type()), -1, [this, tensor, root](uint32_t seq_tag) {
      if (tensor.numel() == 0) return;
      at::Tensor buf = tensor.is_contiguous() ? tensor : tensor.contiguous();
      gloo::BroadcastOptions opts(context_);
      opts.setOutput<uint8_t>(static_cast<uint8_t*>(buf.data_ptr()),
                              static_cast<size_t>(buf.numel()) * buf.element_size());
      opts.setRoot(root);
      opts.setTag(seq_tag);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
      if (!buf.is_same(tensor)) tensor.copy_(buf);
    });
  }

  std::shared_ptr<Work> all_gather(at::Tensor input, at::Tensor output) override {
    check_cpu("all_gather", input);
    check_cpu("all_gather", output);
    if (input.scalar_type() != output.scalar_type()) {
      throw CollectiveError("gloo all_gather: output dtype " + dtype_name(output.scalar_type()) +
                            " differs from input dtype " + dtype_name(input.scalar_type()));
    }
    if (output.numel() != input.numel() * size_) {
      throw CollectiveError("gloo all_gather: output has " + std::to_string(output.numel()) +
                            " elements, expected " + std::to_string(size_) + " x " +
                            std::to_string(input.numel()));
    }
    const int64_t bytes = output.numel() * static_cast<int64_t>(output.element_size());
    return enqueue("all_gather", bytes, dtype_name(input.scalar_type()), -1,
                   [this, input, output](uint32_t seq_tag) {
                     if (input.numel() == 0) return;
                     at::Tensor in = input.contiguous();
                     at::Tensor out = output.is_contiguous() ? output : at::empty_like(output, at::MemoryFormat::Contiguous);
                     const size_t in_bytes = static_cast<size_t>(in.numel()) * in.element_size();
                     gloo::AllgatherOptions opts(context_);
                     opts.setInput<uint8_t>(static_cast<uint8_t*>(in.data_ptr()), in_bytes);
                     opts.setOutput<uint8_t>(static_cast<uint8_t*>(out.data_ptr()), in_bytes * size_);
                     opts.setTag(seq_tag);
                     opts.setTimeout(timeout_);
                     gloo::allgather(opts);
                     if (!out.is_same(output)) output.copy_(out);
                   });
  }

  std::shared_ptr<Work> barrier() override {
    return enqueue("barrier", 0, "", -1, [this](uint32_t seq_tag) {
      gloo::BarrierOptions opts(context_);
      opts.setTag(seq_tag);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

  at::Tensor new_reduction_buffer(int64_t numel, const at::TensorOptions& options) override {
    const at::ScalarType type = options.dtype().toScalarType();
    if (!shm_ || !shm_dtype_of(type) || numel <= 0 || !options.device().is_cpu()) {
      return Collective::new_reduction_buffer(numel, options);
    }
    const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(type);
    // Registering takes barriers on the shared segment, so it runs on the
    // backend thread between collectives, as one of them.
    std::shared_ptr<void> memory;
    auto work = enqueue("register_buffer", static_cast<int64_t>(bytes), dtype_name(type), -1,
                        [this, bytes, &memory](uint32_t) { memory = shm_->register_buffer(bytes); });
    work->wait();  // rethrows a failure (a dead peer, the timeout)
    if (!memory) return Collective::new_reduction_buffer(numel, options);  // /dev/shm refused some rank
    return at::from_blob(memory.get(), {numel}, [memory](void*) {}, options.requires_grad(false));
  }

 private:
  struct Op {
    uint64_t sequence;
    std::string name;
    std::function<void(uint32_t)> fn;
    std::shared_ptr<CompletionWork> work;
  };

  // Every rank's buffer gathered over the TCP pairs, then summed in rank
  // order in place (the shared-memory path's bits).
  void gather_and_sum_in_rank_order(const at::Tensor& buf, uint32_t seq_tag, bool average) {
    const size_t count = static_cast<size_t>(buf.numel());
    const size_t bytes = count * buf.element_size();
    at::Tensor gathered = at::empty({static_cast<int64_t>(bytes) * size_}, buf.options().dtype(at::kByte));
    auto* all = static_cast<uint8_t*>(gathered.data_ptr());
    gloo::AllgatherOptions opts(context_);
    opts.setInput<uint8_t>(static_cast<uint8_t*>(buf.data_ptr()), bytes);
    opts.setOutput<uint8_t>(all, bytes * size_);
    opts.setTag(seq_tag);
    opts.setTimeout(timeout_);
    gloo::allgather(opts);
    std::vector<const void*> inputs;
    for (int r = 0; r < size_; ++r) inputs.push_back(all + static_cast<size_t>(r) * bytes);
    sum_in_rank_order(shm_dtype(buf.scalar_type()), buf.data_ptr(), inputs, count, average, size_);
  }

  // Gloo's ring all-reduce (sum) over the TCP pairs, in place.
  void reduce_over_tcp(const at::Tensor& buf, uint32_t seq_tag) {
    void* data = buf.data_ptr();
    const auto n = static_cast<size_t>(buf.numel());
    switch (buf.scalar_type()) {
      case at::kFloat: gloo_allreduce_sum<float>(context_, data, n, seq_tag, timeout_); break;
      case at::kDouble: gloo_allreduce_sum<double>(context_, data, n, seq_tag, timeout_); break;
      case at::kInt: gloo_allreduce_sum<int32_t>(context_, data, n, seq_tag, timeout_); break;
      case at::kLong: gloo_allreduce_sum<int64_t>(context_, data, n, seq_tag, timeout_); break;
      case at::kChar: gloo_allreduce_sum<int8_t>(context_, data, n, seq_tag, timeout_); break;
      case at::kByte: gloo_allreduce_sum<uint8_t>(context_, data, n, seq_tag, timeout_); break;
      default: throw CollectiveError("unsupported dtype " + dtype_name(buf.scalar_type()));
    }
  }

  void check_cpu(const char* op, const at::Tensor& t) const {
    if (!t.defined()) throw CollectiveError(std::string("gloo ") + op + ": undefined tensor");
    if (!t.device().is_cpu()) {
      throw CollectiveError(std::string("gloo ") + op + ": tensor is on " + t.device().str() +
                            "; the Gloo backend takes CPU tensors only");
    }
  }

  std::string describe(const std::string& name, uint64_t seq) const {
    return "gloo " + name + " #" + std::to_string(seq) + " (rank " + std::to_string(rank_) + " of " +
           std::to_string(size_) + ")";
  }

  std::shared_ptr<Work> enqueue(std::string name, int64_t bytes, std::string dtype, int bucket,
                                std::function<void(uint32_t)> fn) {
    std::shared_ptr<CompletionWork> work;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // Numbered under the queue lock so sequence order is queue order.
      const uint64_t seq = recorder_.enqueue(name, bytes, std::move(dtype), bucket, SystemClock::instance().now());
      work = std::make_shared<CompletionWork>(seq);
      queue_.push_back(Op{seq, std::move(name), std::move(fn), work});
    }
    cv_.notify_all();
    return work;
  }

  void run() {
    for (;;) {
      Op op;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and drained
        op = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!broken_.empty()) {
        recorder_.mark_ended(op.sequence, false, SystemClock::instance().now());
        op.work->finish(std::make_exception_ptr(
            CollectiveError(describe(op.name, op.sequence) + " not run: the communicator failed earlier: " + broken_)));
        continue;
      }
      recorder_.mark_started(op.sequence, SystemClock::instance().now());
      std::exception_ptr error;
      try {
        op.fn(static_cast<uint32_t>(op.sequence));
      } catch (const std::exception& e) {
        broken_ = describe(op.name, op.sequence) + " failed: " + e.what();
        error = std::make_exception_ptr(CollectiveError(broken_));
      } catch (...) {
        broken_ = describe(op.name, op.sequence) + " failed: unknown error";
        error = std::make_exception_ptr(CollectiveError(broken_));
      }
      recorder_.mark_ended(op.sequence, !error, SystemClock::instance().now());
      op.work->finish(error);
    }
  }

  const int rank_;
  const int size_;
  const GlooOptions options_;
  const std::chrono::milliseconds timeout_;
  FlightRecorder recorder_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  // all_reduce goes through shared memory when every rank is on this host.
  std::unique_ptr<SharedMemoryAllreduce> shm_;
  bool sum_in_rank_order_ = false;  // TCP all-reduces as gather + rank-order sum (GlooOptions)
  std::string shm_unused_reason_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  bool stopping_ = false;
  std::string broken_;  // backend thread only
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Collective> make_gloo_collective(std::shared_ptr<Store> store, int rank, int size,
                                                 GlooOptions options) {
  return std::make_unique<GlooCollective>(std::move(store), rank, size, std::move(options));
}

}  // namespace ddp
