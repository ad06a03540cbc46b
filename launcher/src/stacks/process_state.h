#pragma once
// What a worker that did not answer a request for its stacks is doing, as the
// kernel sees it (/proc/<pid>/stat and wchan): stopped by a signal, in
// uninterruptible sleep, running with Python's GIL held, gone. One line, for
// the merged stacks in place of the stack the worker could not send.
//
// Threading: free functions, no shared state.

#include <string>

namespace ddp {

/// The line for a process in `state` (the letter of /proc/<pid>/stat; 0: the
/// process is gone) waiting at kernel function `wchan` (empty: unknown).
std::string describe_process_state(char state, const std::string& wchan);

/// Reads /proc/<pid>/stat and /proc/<pid>/wchan and describes the process.
std::string describe_unanswering_process(int pid);

}  // namespace ddp
