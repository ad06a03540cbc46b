#pragma once
// The Python stacks of a rank whose companion could not answer in time (a
// thread holds the GIL in C code, the companion's thread is starved): the
// companion arms the standard library's faulthandler in the rank (and in its
// forked children) to write every thread's stack into an anonymous memory
// file (memfd "ddplaunch-stacks") on SIGRTMIN+6, from the signal handler,
// without the GIL (launcher/python/_ddplaunch_companion/child_stacks.py).
// The agent signals such a rank and reads that file through /proc/<pid>/fd.
//
// A process is signalled only while it still has that file and catches the
// signal (an exec() drops both; the signal's default action would end it),
// and only when running or sleeping (a stopped process would not answer).
//
// Threading: free functions, no shared state. python_stacks_by_signal blocks
// the caller for up to `wait`.

#include <optional>
#include <string>
#include <vector>

#include "ddp/common/clock.h"
#include "stacks/rank_stacks.h"

namespace ddp {

/// SIGRTMIN+6 (the runtime's own C++ stack dumps use SIGRTMIN+5).
int python_stack_signal();

/// The name the companion gives its memory file.
inline constexpr const char* kPythonStackMemfdName = "ddplaunch-stacks";

/// faulthandler's all-threads text as threads, frames outermost first, the
/// source line's text left empty. The main thread is the one whose stack does
/// not begin in threading.py's _bootstrap (threads started by the threading
/// module do), else the one the signal ran on ("Current thread").
std::vector<ThreadStack> parse_faulthandler_dump(const std::string& text);

/// Signals `pid` and parses what its faulthandler wrote; nullopt when the
/// process is not armed, not running or sleeping, or wrote nothing within
/// `wait`.
std::optional<std::vector<ThreadStack>> python_stacks_by_signal(int pid, Duration wait);

}  // namespace ddp
