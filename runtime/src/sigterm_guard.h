#pragma once
// The runtime's half of ddplaunch's stop at a step boundary under Slurm.
//
// Slurm's --signal, `scancel --signal=TERM`, a preemption or a time limit send
// SIGTERM to every process of the job step: to ddplaunch and to this worker at
// the same moment. With --stop-timeout ddplaunch answers by stopping every
// rank after one common step (TrainingProgress::stop_requested()), so the
// worker must not die of that signal first. ddplaunch names a file,
// DDPLAUNCH_SIGNAL_INTENT_FILE, whose one word says what a SIGTERM means now
// (launcher/src/job/rank_signal_intent.h):
//   "stopping"     a stop at a step boundary is under way: ignore it;
//   "terminating"  ddplaunch itself is signalling its ranks: die of it;
//   no file        wait up to `wait` for ddplaunch to say, then die of it.
// Dying of it is the default action: the process ends by SIGTERM.
//
// The handler only wakes a thread (sem_post); the thread reads the file and
// decides, so a worker blocked in a collective decides all the same.
//
// Threading: install once, from any thread; the guard's thread lives as long
// as the process. A program that handles or ignores SIGTERM itself keeps its
// own disposition: nothing is installed then.

#include <chrono>
#include <string>

namespace ddp {

/// Installs the guard for the intent file at `path` (empty: does nothing).
/// True when installed now; false when empty, already installed, or SIGTERM
/// was not at its default disposition.
bool install_sigterm_guard(const std::string& path,
                           std::chrono::milliseconds wait = std::chrono::milliseconds(3000));

/// install_sigterm_guard(DDPLAUNCH_SIGNAL_INTENT_FILE) when it is set.
bool install_sigterm_guard_from_environment();

}  // namespace ddp
