#pragma once
// ThreadCollective: a Collective for ranks that are threads of one process.
// Every rank owns a worker thread that runs its ops in call order (so calls
// return a Work at once, as with a real backend); op k of every rank meets op
// k of the others at a shared barrier and the data really moves through
// shared memory (all_reduce sums every rank's tensor, in rank order, in
// float64, and writes the result back in the tensor's dtype). A rank whose
// peers do not arrive within the timeout, or arrive with another op, gets a
// CollectiveError instead of hanging the test.

#include <ATen/ATen.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ddp/runtime/collective.h"
#include "ddp/runtime/completion_work.h"

namespace ddp::testing {

class ThreadGroup {
 public:
  explicit ThreadGroup(int size, std::chrono::milliseconds timeout = std::chrono::seconds(30))
      : size_(size), timeout_(timeout), slots_(static_cast<size_t>(size)), ops_(static_cast<size_t>(size)) {}
  int size() const { return size_; }

  // Cyclic barrier; throws CollectiveError on timeout.
  void arrive(const std::string& what) {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t gen = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, timeout_, [&] { return generation_ != gen; })) {
      throw CollectiveError("thread collective: timed out waiting for peers in " + what);
    }
  }
  std::vector<at::Tensor>& slots() { return slots_; }
  std::vector<std::string>& ops() { return ops_; }

 private:
  int size_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::vector<at::Tensor> slots_;
  std::vector<std::string> ops_;
};

class ThreadCollective final : public Collective {
 public:
  ThreadCollective(std::shared_ptr<ThreadGroup> group, int rank) : group_(std::move(group)), rank_(rank) {
    worker_ = std::thread([this] { run(); });
  }
  ~ThreadCollective() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      cv_.notify_all();
    }
    worker_.join();
  }

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string backend() const override { return "threads"; }

  std::shared_ptr<Work> all_reduce(at::Tensor tensor, ReduceOp op, CollectiveTag tag) override {
    return enqueue("all_reduce", tensor, tag.bucket, [this, tensor, op]() mutable {
      ThreadGroup& g = *group_;
      g.slots()[rank_] = tensor;
      meet("all_reduce");
      at::Tensor acc = at::zeros(tensor.sizes(), tensor.options().dtype(at::kDouble));
      for (int r = 0; r < g.size(); ++r) acc.add_(g.slots()[r].to(at::kDouble));
      if (op == ReduceOp::kAvg) acc.div_(g.size());
      g.arrive("all_reduce (read)");
      tensor.copy_(acc);
    });
  }
  std::shared_ptr<Work> broadcast(at::Tensor tensor, int root) override {
    return enqueue("broadcast", tensor, -1, [this, tensor, root]() mutable {
      ThreadGroup& g = *group_;
      g.slots()[rank_] = tensor;
      meet("broadcast");
      at::Tensor src = rank_ == root ? at::Tensor() : g.slots()[root].clone();
      g.arrive("broadcast (read)");
      if (rank_ != root) tensor.copy_(src);
    });
  }
  std::shared_ptr<Work> all_gather(at::Tensor input, at::Tensor output) override {
    return enqueue("all_gather", input, -1, [this, input, output]() mutable {
      ThreadGroup& g = *group_;
      g.slots()[rank_] = input;
      meet("all_gather");
      at::Tensor rows = output.view({g.size(), -1});
      for (int r = 0; r < g.size(); ++r) rows[r].copy_(g.slots()[r].reshape({-1}));
      g.arrive("all_gather (read)");
    });
  }
  std::shared_ptr<Work> barrier() override {
    return enqueue("barrier", at::Tensor(), -1, [this] { meet("barrier"); });
  }
  const FlightRecorder& flight_record() const override { return recorder_; }

 private:
  // Everyone posts its op name, meets, and checks that all called the same op.
  void meet(const std::string& op) {
    ThreadGroup& g = *group_;
    g.ops()[rank_] = op;
    g.arrive(op);
    std::string mismatch;
    for (int r = 0; r < g.size(); ++r) {
      if (g.ops()[r] != op) mismatch = "rank " + std::to_string(r) + " called " + g.ops()[r];
    }
    if (!mismatch.empty()) {
      g.arrive(op + " (check)");
      throw CollectiveError("thread collective: rank " + std::to_string(rank_) + " called " + op + " but " +
                            mismatch);
    }
  }

  std::shared_ptr<Work> enqueue(const std::string& op, const at::Tensor& t, int bucket, std::function<void()> fn) {
    const int64_t bytes = t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
    const std::string dtype = t.defined() ? std::string(c10::toString(t.scalar_type())) : std::string();
    const uint64_t seq = recorder_.enqueue(op, bytes, dtype, bucket, std::chrono::steady_clock::now());
    auto work = std::make_shared<CompletionWork>(seq);
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Item{seq, std::move(fn), work});
    cv_.notify_all();
    return work;
  }

  void run() {
    for (;;) {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      recorder_.mark_started(item.seq, std::chrono::steady_clock::now());
      std::exception_ptr error;
      try {
        item.fn();
      } catch (...) {
        error = std::current_exception();
      }
      recorder_.mark_ended(item.seq, !error, std::chrono::steady_clock::now());
      item.work->finish(error);
    }
  }

  struct Item {
    uint64_t seq = 0;
    std::function<void()> fn;
    std::shared_ptr<CompletionWork> work;
  };

  std::shared_ptr<ThreadGroup> group_;
  int rank_;
  FlightRecorder recorder_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::thread worker_;
};

}  // namespace ddp::testing
