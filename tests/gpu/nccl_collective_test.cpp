// The NCCL backend on a real GPU (label gpu). Every test skips when
// ddp_runtime was built without NCCL or the process sees no CUDA device.
//
// Most tests drive the backend with raw device buffers (cudaMalloc) wrapped as
// CUDA tensors without LibTorch's CUDA support, so they run with a CPU build of
// LibTorch too; the tests that need CUDA tensor arithmetic skip unless
// torch::cuda::is_available().

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include <chrono>
#include <string>

#include "ddp/runtime/collective.h"
#include "ddp/runtime/init.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#if DDP_HAVE_NCCL
#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "ddp/runtime/nccl_collective.h"
#endif

namespace {

using namespace std::chrono_literals;

/// A TCP port free right now on 127.0.0.1.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

/// The environment of a one-rank job started without ddplaunch.
void set_single_rank_env() {
  unsetenv("DDPLAUNCH_AGENT_SOCKET");
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_RANK", "0", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(free_port()).c_str(), 1);
}

bool gpu_backend_possible() {
#if DDP_HAVE_NCCL
  return ddp::cuda_device_count() > 0;
#else
  return false;
#endif
}

// Runs everywhere: "nccl" is refused up front (before joining) where it cannot
// work, and builds a one-rank NCCL world through the env-mode store where it can.
TEST(NcclInit, ExplicitNcclBackend) {
  set_single_rank_env();
  ddp::InitOptions options;
  options.backend = "nccl";
  options.timeout = 60s;
  if (!gpu_backend_possible()) {
    try {
      ddp::init(options);
      FAIL() << "backend nccl was accepted without NCCL or a GPU";
    } catch (const ddp::InitError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("needs a CUDA device") != std::string::npos ||
                  what.find("not available") != std::string::npos)
          << what;
    }
    return;
  }
  auto group = ddp::init(options);
  EXPECT_EQ(group->collective().backend(), "nccl");
  EXPECT_TRUE(group->collective().barrier()->wait(60s));
}

TEST(NcclInit, AutoPicksNcclOnlyWithAGpu) {
  set_single_rank_env();
  ddp::InitOptions options;
  options.timeout = 60s;
  auto group = ddp::init(options);
  EXPECT_EQ(group->collective().backend(), gpu_backend_possible() ? "nccl" : "gloo");
  EXPECT_TRUE(group->collective().barrier()->wait(60s));
}

#if !DDP_HAVE_NCCL

TEST(NcclCollective, NotBuilt) {
  GTEST_SKIP() << "ddp_runtime was built without NCCL (CMake found no CUDA toolkit or NCCL)";
}

#else

/// A device buffer, freed at scope end, seen as a CUDA tensor on `device`.
class DeviceBuffer {
 public:
  DeviceBuffer(int64_t numel, at::ScalarType type, int device = 0) : numel_(numel), type_(type), device_(device) {
    bytes_ = static_cast<size_t>(numel) * c10::elementSize(type);
    cudaSetDevice(device);
    if (cudaMalloc(&ptr_, bytes_ == 0 ? 1 : bytes_) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  /// A CUDA tensor over the buffer, made without LibTorch's CUDA hooks (a CPU
  /// build of LibTorch refuses from_blob on a CUDA device).
  at::Tensor tensor() const {
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes_,
                         c10::DataPtr(ptr_, c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device_))),
                         nullptr, false);
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                                            caffe2::TypeMeta::fromScalarType(type_));
    t.unsafeGetTensorImpl()->set_sizes_contiguous({numel_});
    return t;
  }
  void upload(const at::Tensor& host) {
    const at::Tensor h = host.contiguous();
    ASSERT_EQ(h.scalar_type(), type_);
    ASSERT_EQ(h.numel(), numel_);
    ASSERT_EQ(cudaMemcpy(ptr_, h.data_ptr(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
  }
  at::Tensor download() const {
    at::Tensor h = at::empty({numel_}, at::TensorOptions().dtype(type_));
    EXPECT_EQ(cudaMemcpy(h.data_ptr(), ptr_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }

 private:
  int64_t numel_;
  at::ScalarType type_;
  int device_;
  size_t bytes_ = 0;
  void* ptr_ = nullptr;
};

/// Holds the legacy default stream (the compute stream of these tests, and
/// LibTorch's default stream) in a host callback until release(), so that an
/// op ordered after it cannot start.
class StreamBlocker {
 public:
  StreamBlocker() {
    EXPECT_EQ(cudaLaunchHostFunc(cudaStreamLegacy, &StreamBlocker::hold, &released_), cudaSuccess);
  }
  ~StreamBlocker() { release(); }
  StreamBlocker(const StreamBlocker&) = delete;
  StreamBlocker& operator=(const StreamBlocker&) = delete;
  void release() { released_.store(true); }

 private:
  static void CUDART_CB hold(void* flag) {
    auto* released = static_cast<std::atomic<bool>*>(flag);
    while (!released->load()) std::this_thread::sleep_for(1ms);
  }
  std::atomic<bool> released_{false};
};

class NcclCollectiveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ddp::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    comm_ = ddp::make_nccl_collective(ddp::nccl_new_unique_id(), 0, 1, 0, options_);
  }

  void check_all_reduce(at::ScalarType type, ddp::ReduceOp op) {
    const int64_t n = 4099;  // odd, not a multiple of any vector width
    // Small integers times 0.5: exact in float16 and bfloat16 too.
    const at::Tensor host = (at::arange(n, at::kFloat).remainder(128) * 0.5).to(type);
    DeviceBuffer buf(n, type);
    buf.upload(host);
    auto work = comm_->all_reduce(buf.tensor(), op);
    ASSERT_TRUE(work->wait(30s));
    EXPECT_TRUE(work->is_completed());
    EXPECT_EQ(work->error(), nullptr);
    // A world of one: sum and mean are the input itself.
    EXPECT_TRUE(at::equal(buf.download(), host)) << c10::toString(type);
  }

  ddp::NcclOptions options_;
  std::unique_ptr<ddp::Collective> comm_;
};

TEST_F(NcclCollectiveTest, CreatesFromAUniqueId) {
  EXPECT_EQ(comm_->backend(), "nccl");
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->size(), 1);
  std::printf("NCCL %s, %d CUDA device(s)\n", ddp::nccl_version().c_str(), ddp::cuda_device_count());
}

TEST_F(NcclCollectiveTest, RejectsABadUniqueIdAndRank) {
  EXPECT_THROW(ddp::make_nccl_collective("short", 0, 1, 0), ddp::CollectiveError);
  EXPECT_THROW(ddp::make_nccl_collective(ddp::nccl_new_unique_id(), 1, 1, 0), ddp::CollectiveError);
  EXPECT_THROW(ddp::make_nccl_collective(ddp::nccl_new_unique_id(), 0, 1, 4096), ddp::CollectiveError);
}

TEST_F(NcclCollectiveTest, AllReduceFloat32) {
  check_all_reduce(at::kFloat, ddp::ReduceOp::kSum);
  check_all_reduce(at::kFloat, ddp::ReduceOp::kAvg);
  check_all_reduce(at::kDouble, ddp::ReduceOp::kSum);
}

TEST_F(NcclCollectiveTest, AllReduceFloat16) {
  check_all_reduce(at::kHalf, ddp::ReduceOp::kSum);
  check_all_reduce(at::kHalf, ddp::ReduceOp::kAvg);
}

TEST_F(NcclCollectiveTest, AllReduceBFloat16) {
  DeviceBuffer probe(1, at::kBFloat16);
  try {
    comm_->all_reduce(probe.tensor(), ddp::ReduceOp::kSum)->wait(30s);
  } catch (const ddp::CollectiveError& e) {
    GTEST_SKIP() << "bfloat16 not supported by this build: " << e.what();
  }
  check_all_reduce(at::kBFloat16, ddp::ReduceOp::kSum);
  check_all_reduce(at::kBFloat16, ddp::ReduceOp::kAvg);
}

TEST_F(NcclCollectiveTest, AllReduceIntegersAndRefusesIntegerMean) {
  check_all_reduce(at::kInt, ddp::ReduceOp::kSum);
  check_all_reduce(at::kLong, ddp::ReduceOp::kSum);
  DeviceBuffer buf(8, at::kInt);
  EXPECT_THROW(comm_->all_reduce(buf.tensor(), ddp::ReduceOp::kAvg), ddp::CollectiveError);
}

TEST_F(NcclCollectiveTest, BroadcastAndAllGather) {
  const at::Tensor host = at::arange(1000, at::kFloat);
  DeviceBuffer buf(1000, at::kFloat);
  buf.upload(host);
  ASSERT_TRUE(comm_->broadcast(buf.tensor(), 0)->wait(30s));
  EXPECT_TRUE(at::equal(buf.download(), host));
  EXPECT_THROW(comm_->broadcast(buf.tensor(), 1), ddp::CollectiveError);

  DeviceBuffer out(1000, at::kFloat);
  ASSERT_TRUE(comm_->all_gather(buf.tensor(), out.tensor())->wait(30s));
  EXPECT_TRUE(at::equal(out.download(), host));
  DeviceBuffer wrong(999, at::kFloat);
  EXPECT_THROW(comm_->all_gather(buf.tensor(), wrong.tensor()), ddp::CollectiveError);
}

TEST_F(NcclCollectiveTest, BarrierAndFlightRecord) {
  const uint64_t before = comm_->flight_record().last_enqueued();
  auto work = comm_->barrier();
  ASSERT_TRUE(work->wait(30s));
  EXPECT_EQ(work->sequence(), before + 1);
  // The watchdog may note the end a moment after wait() saw it.
  for (int i = 0; i < 200 && comm_->flight_record().last_completed() < work->sequence(); ++i) {
    std::this_thread::sleep_for(5ms);
  }
  const auto tail = comm_->flight_record().tail(1);
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].op, "barrier");
  EXPECT_EQ(tail[0].state, ddp::CollectiveState::kCompleted);
}

TEST_F(NcclCollectiveTest, RefusesTensorsNotOnItsDevice) {
  try {
    comm_->all_reduce(at::ones({4}), ddp::ReduceOp::kSum);
    FAIL() << "a CPU tensor was accepted";
  } catch (const ddp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

TEST_F(NcclCollectiveTest, WaitTimesOutWhileTheComputeStreamIsBusy) {
  DeviceBuffer buf(256, at::kFloat);
  buf.upload(at::ones({256}));
  StreamBlocker blocker;
  auto work = comm_->all_reduce(buf.tensor(), ddp::ReduceOp::kSum);
  EXPECT_FALSE(work->wait(50ms));  // ordered after the blocked compute stream
  EXPECT_FALSE(work->is_completed());
  blocker.release();
  EXPECT_TRUE(work->wait(30s));
  EXPECT_TRUE(work->is_completed());
}

class NcclShortTimeoutTest : public NcclCollectiveTest {
 protected:
  void SetUp() override {
    options_.timeout = 500ms;
    NcclCollectiveTest::SetUp();
  }
};

TEST_F(NcclShortTimeoutTest, AnOpPastItsDeadlineAbortsTheCommunicator) {
  DeviceBuffer buf(256, at::kFloat);
  StreamBlocker blocker;
  auto work = comm_->all_reduce(buf.tensor(), ddp::ReduceOp::kSum);
  const auto start = std::chrono::steady_clock::now();
  try {
    work->wait(30s);
    FAIL() << "an op held past its deadline completed";
  } catch (const ddp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("did not end within"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_NE(work->error(), nullptr);
  // Broken for good: later ops fail at once.
  EXPECT_THROW(comm_->barrier()->wait(1s), ddp::CollectiveError);
  blocker.release();
}

TEST(NcclCollectiveTorch, CudaTensorsOrderAfterTheComputeStream) {
  if (ddp::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device visible to this process";
  if (!torch::cuda::is_available()) GTEST_SKIP() << "LibTorch has no CUDA support (a CPU build)";
  auto comm = ddp::make_nccl_collective(ddp::nccl_new_unique_id(), 0, 1, 0);
  const auto on_gpu = torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, 0);
  for (int64_t n : {int64_t{1}, int64_t{1} << 10, int64_t{1} << 22}) {
    at::Tensor t = torch::full({n}, 2.0, on_gpu);
    t.mul_(3);  // queued on the compute stream just before the collective
    ASSERT_TRUE(comm->all_reduce(t, ddp::ReduceOp::kAvg)->wait(30s));
    EXPECT_TRUE(torch::all(t.cpu() == 6).item<bool>()) << n;
  }
  at::Tensor half = torch::full({1000}, 1.5, on_gpu.dtype(torch::kHalf));
  ASSERT_TRUE(comm->all_reduce(half, ddp::ReduceOp::kSum)->wait(30s));
  EXPECT_TRUE(torch::all(half.cpu() == 1.5).item<bool>());
  at::Tensor strided = torch::zeros({8, 8}, on_gpu).t();
  EXPECT_THROW(comm->all_reduce(strided, ddp::ReduceOp::kSum), ddp::CollectiveError);
}

TEST(NcclCollectiveMultiGpu, OneRankPerDevice) {
  const int n = ddp::cuda_device_count();
  if (n < 2) GTEST_SKIP() << "needs two CUDA devices, this process sees " << n;
  const std::string id = ddp::nccl_new_unique_id();
  std::vector<std::unique_ptr<ddp::Collective>> comms(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        comms[r] = ddp::make_nccl_collective(id, r, n, r);
        DeviceBuffer buf(1 << 20, at::kFloat, r);
        buf.upload(at::full({1 << 20}, static_cast<float>(r + 1)));
        comms[r]->all_reduce(buf.tensor(), ddp::ReduceOp::kSum)->wait(60s);
        const at::Tensor got = buf.download();
        if (!at::all(got == static_cast<float>(n * (n + 1) / 2)).item<bool>()) errors[r] = "wrong sum";
        comms[r]->barrier()->wait(60s);
        comms[r].reset();  // every rank finalizes its communicator at the same time
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

#endif  // DDP_HAVE_NCCL

}  // namespace
