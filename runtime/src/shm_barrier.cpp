#include "shm_barrier.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

namespace ddp {
namespace {

// Shared (not FUTEX_PRIVATE) futexes: the waiters are in different processes.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds slice) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(slice.count() / 1000);
  ts.tv_nsec = static_cast<long>((slice.count() % 1000) * 1000000);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Whether pid has ended: gone, or a zombie its parent has not reaped yet.
bool process_ended(pid_t pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat_path = "/proc/" + std::to_string(pid) + "/stat";
  std::FILE* f = std::fopen(stat_path.c_str(), "r");
  if (f == nullptr) return true;
  char line[512];
  const size_t n = std::fread(line, 1, sizeof line - 1, f);
  std::fclose(f);
  line[n] = '\0';
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
  const char* close = std::strrchr(line, ')');
  return close != nullptr && close[1] == ' ' && close[2] == 'Z';
}

// Another process's pid, until it ends or `limit` passes.
void wait_for_exit(pid_t pid, std::chrono::milliseconds limit) {
  if (pid <= 0 || pid == getpid()) return;  // ranks in threads of one process share theirs
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!process_ended(pid) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

ShmBarrier::ShmBarrier(ShmBarrierState* state, int rank, int size) : state_(state), rank_(rank), size_(size) {
  if (size < 1 || size > kShmMaxRanks || rank < 0 || rank >= size) {
    throw ShmBarrierError("shared-memory barrier: rank " + std::to_string(rank) + " of " + std::to_string(size) +
                          " is out of range (at most " + std::to_string(kShmMaxRanks) + " ranks)");
  }
  state_->pids[rank].store(static_cast<int32_t>(getpid()), std::memory_order_release);
}

void ShmBarrier::arrive_and_wait(std::chrono::milliseconds timeout) {
  const uint32_t generation = state_->generation.load(std::memory_order_acquire);
  if (state_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<uint32_t>(size_)) {
    // Last in: reset before releasing, so a fast rank's next arrival counts anew.
    state_->arrived.store(0, std::memory_order_relaxed);
    state_->generation.fetch_add(1, std::memory_order_release);
    futex_wake_all(&state_->generation);
    return;
  }
  for (int spin = 0; spin < 4000; ++spin) {
    if (state_->generation.load(std::memory_order_acquire) != generation) return;
    cpu_relax();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  constexpr std::chrono::milliseconds kSlice(50);
  while (state_->generation.load(std::memory_order_acquire) == generation) {
    check_peers();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      abort();
      throw ShmBarrierError("shared-memory all-reduce: rank " + std::to_string(rank_) + " waited " +
                            std::to_string(timeout.count()) + " ms for its peers (timeout)");
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    futex_wait(&state_->generation, generation, std::min(kSlice, std::max(left, std::chrono::milliseconds(1))));
  }
}

void ShmBarrier::check_peers() const {
  const uint32_t aborted = state_->aborted.load(std::memory_order_acquire);
  if (aborted != 0) {
    const int gone = static_cast<int>((aborted & ~kLeftFlag) - 1);
    // The rank that gave up or left is usually failing: it destroys its
    // communicator while its error unwinds, and exits a little later. Failing
    // at once here would make this rank's exit, a consequence, come first
    // and be taken for the job's root cause; so wait (bounded) for that
    // rank's process to end first.
    if (gone >= 0 && gone < size_) {
      wait_for_exit(state_->pids[gone].load(std::memory_order_acquire), kRootCauseExitWait);
    }
    const std::string who = "shared-memory all-reduce: rank " + std::to_string(gone);
    throw ShmBarrierError(who + ((aborted & kLeftFlag) != 0 ? " left the group (its communicator was destroyed)"
                                                              : " gave up (timeout or error)"));
  }
  for (int r = 0; r < size_; ++r) {
    const pid_t pid = state_->pids[r].load(std::memory_order_acquire);
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
      throw ShmBarrierError("shared-memory all-reduce: rank " + std::to_string(r) + " (pid " + std::to_string(pid) +
                            ") exited during the collective");
    }
  }
}

void ShmBarrier::abort() { mark_aborted(static_cast<uint32_t>(rank_ + 1)); }

void ShmBarrier::leave() { mark_aborted(static_cast<uint32_t>(rank_ + 1) | kLeftFlag); }

void ShmBarrier::mark_aborted(uint32_t value) {
  uint32_t none = 0;  // the first reason stays
  state_->aborted.compare_exchange_strong(none, value, std::memory_order_acq_rel);
  // Waiters wake and see the flag on their next check.
  futex_wake_all(&state_->generation);
}

}  // namespace ddp
