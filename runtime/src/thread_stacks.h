#pragma once
// Capture of every thread's raw stack in this process, the first half of
// dump_all_thread_stacks() (health.h); stack_symbolizer.h is the second.
//
// A thread's stack can only be walked by that thread, so the requester sends
// each thread in /proc/self/task a real-time signal (SIGRTMIN+5). The handler
// does as little as it can: backtrace() into a slot the requester allocated
// beforehand, then it publishes its tid and bumps a counter. Everything that
// allocates, takes locks or reads files (thread names, symbols, the log)
// happens afterwards on the requesting thread, outside signal context.
//
// Threading: capture_thread_stacks() may be called from any thread (the
// heartbeat thread does); concurrent calls are serialized. Threads that never
// answer (they block the signal, are stopped, or stay in the kernel) cost the
// requester at most `wait`; they are listed without frames.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ddp {

struct RawThreadStack {
  int tid = 0;
  std::string name;  // /proc/self/task/<tid>/comm
  bool main = false;  // tid == getpid(): the program's main thread
  bool answered = false;
  std::string why_not;  // when !answered: why it has no frames
  /// Innermost first, the signal handler's own frames already dropped:
  /// pcs[0] is where the thread was interrupted, the rest are return
  /// addresses (the symbolizer looks them up one byte earlier, inside the call).
  std::vector<uintptr_t> pcs;
};

/// Every thread of this process, the main thread first, then by tid. Waits at
/// most `wait` for the signalled threads to answer (polling, not blocking:
/// the answers come from signal handlers).
std::vector<RawThreadStack> capture_thread_stacks(std::chrono::milliseconds wait);

}  // namespace ddp
