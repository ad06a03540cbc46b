#pragma once
// The NCCL backend of Collective: CUDA tensors on one GPU per rank.
// Built only when CMake found the CUDA toolkit and NCCL (DDP_HAVE_NCCL=1 is
// then defined for everything that links ddp::runtime); this header needs
// neither CUDA nor NCCL headers.
//
// Bootstrap: every rank passes the same NCCL unique id (the 128 bytes of an
// ncclUniqueId; under ddplaunch the coordinator hands it out, see
// AgentConnection::nccl_unique_id; otherwise rank 0 makes one with
// nccl_new_unique_id and shares it). The communicator is created non-blocking
// (ncclCommInitRankConfig with blocking=0 where NCCL has it, 2.14 and later),
// and its creation is polled with ncclCommGetAsyncError up to the timeout; on
// timeout or error it is aborted and CollectiveError carries NCCL's text.
//
// Streams: the collective owns one CUDA stream on its device. Each op first
// makes that stream wait for an event recorded on the caller's current compute
// stream (c10::cuda::getCurrentCUDAStream with a CUDA build of LibTorch, the
// legacy default stream otherwise), so it sees every kernel queued before the
// call; then the NCCL call; then a completion event. Work::wait polls that
// event (cudaEventQuery) and the communicator's async error; it never blocks
// the compute stream and never syncs the device. Work keeps the tensors alive
// until the op has ended. A caller that uses the result on the GPU should
// wait() first (that orders the host, and with it every later launch).
//
// Failure and timeouts: a watchdog thread polls the outstanding ops and
// ncclCommGetAsyncError. An async error, or an op still running
// options.timeout after it was issued, aborts the communicator
// (ncclCommAbort), fails every outstanding op with CollectiveError, and every
// later call fails at once: nothing waits forever on a dead peer. Work::wait
// with a shorter timeout just returns false, as in the Gloo backend.
//
// Dtypes: all_reduce takes float32, float64, float16, bfloat16 (NCCL 2.10
// and later), int32, int64, int8 and uint8; kAvg uses ncclAvg (NCCL 2.10 and
// later; older NCCL pre-divides on the compute stream) and needs a floating
// dtype. broadcast and all_gather move bytes and take any dtype. Tensors must
// be contiguous and on this collective's CUDA device; anything else is refused
// with a CollectiveError naming the device. barrier is a one-element
// all-reduce on an internal buffer.
//
// Threading: as for every Collective, calls come from one thread at a time
// (any thread: the device is set for the duration of each call and restored);
// Work handles may be waited on from any thread.

#include <chrono>
#include <memory>
#include <string>

#include "ddp/common/clock.h"
#include "ddp/runtime/collective.h"

namespace ddp {

struct NcclOptions {
  /// Bound on communicator creation and on each collective (from its issue).
  Duration timeout = std::chrono::seconds(300);
  /// Entries kept in the flight record.
  size_t flight_record_capacity = 1024;
};

/// Creates the communicator for rank `rank` of `size` on CUDA device `device`
/// from the 128 bytes of an ncclUniqueId (the same on every rank). Blocks until
/// every rank has joined; throws CollectiveError on a bad argument, a CUDA or
/// NCCL error, or the timeout (the communicator is then aborted).
std::unique_ptr<Collective> make_nccl_collective(const std::string& unique_id_bytes, int rank, int size, int device,
                                                 NcclOptions options = {});

/// A fresh ncclUniqueId as 128 bytes (ncclGetUniqueId); throws CollectiveError.
std::string nccl_new_unique_id();

/// The CUDA devices this process sees (cudaGetDeviceCount); 0 when there is no
/// driver or no device (never throws).
int cuda_device_count();

/// NCCL's version as "2.28.9" (the library loaded, not the header).
std::string nccl_version();

}  // namespace ddp
