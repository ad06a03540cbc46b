#pragma once
// ShmBarrier: a barrier for the processes (or threads) of one host that share
// a memory segment. Sense-reversing: `arrived` counts ranks in, the last one
// resets it and bumps `generation`, which the others wait on with a futex
// (after a short spin: on an idle core the wake-up then costs no syscall).
//
// Waiting is bounded: every 50 ms a waiter checks that each peer process is
// still alive (kill(pid, 0)) and whether a peer marked the group aborted, and
// gives up at the deadline. So a peer that died inside a collective is named
// within about 50 ms instead of after the whole timeout.
//
// Layout: ShmBarrierState lives inside the shared segment (placement-new by
// the creator, before any other rank maps it); it holds only lock-free atomics,
// which are address-free and work across processes.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <sys/types.h>

namespace ddp {

constexpr int kShmMaxRanks = 256;

struct ShmBarrierState {
  std::atomic<uint32_t> arrived{0};
  std::atomic<uint32_t> generation{0};
  std::atomic<uint32_t> aborted{0};       // 0, or 1 + the rank that gave up (| kLeftFlag: it left)
  std::atomic<int32_t> pids[kShmMaxRanks];  // each rank's pid, set when it joins
};

/// A peer died, the group was aborted, or the deadline passed.
class ShmBarrierError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShmBarrier {
 public:
  // How long a waiter told that a peer gave up or left waits for that peer's
  // process to end before failing itself (check_peers says why).
  static constexpr std::chrono::milliseconds kRootCauseExitWait{2000};

  /// state: inside the shared segment, outliving this object. Records this
  /// rank's pid for the liveness checks of the others.
  ShmBarrier(ShmBarrierState* state, int rank, int size);

  /// Returns once all `size` ranks called it; throws ShmBarrierError on a dead
  /// peer, an abort or the timeout (the message says which).
  void arrive_and_wait(std::chrono::milliseconds timeout);

  /// Makes every current and future wait of the peers fail at once.
  void abort();
  /// As abort(), for a rank that is done with the group (its communicator is
  /// being destroyed): peers still waiting for it are told it left.
  void leave();

 private:
  void check_peers() const;
  void mark_aborted(uint32_t value);
  static constexpr uint32_t kLeftFlag = 0x80000000u;

  ShmBarrierState* state_;
  int rank_;
  int size_;
};

}  // namespace ddp
