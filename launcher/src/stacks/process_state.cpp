#include "stacks/process_state.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace ddp {

std::string describe_process_state(char state, const std::string& wchan) {
  const std::string where = wchan.empty() || wchan == "0" ? "" : fmt::format(", kernel wait {}", wchan);
  switch (state) {
    case 0: return "its process is gone";
    case 'T': return "stopped by a signal (state T: SIGSTOP or SIGTSTP), so it cannot answer; SIGCONT resumes it";
    case 't': return "stopped by a debugger or tracer (state t), so it cannot answer";
    case 'Z':
    case 'X': return "its process has exited";
    case 'D': return fmt::format("in uninterruptible sleep in the kernel (state D{}), so it cannot answer", where);
    case 'R':
      return "running (state R) but did not answer: a thread may hold Python's GIL in C code, or the program has no "
             "ddplaunch heartbeats";
    default:
      return fmt::format("did not answer (state {}{}): a thread may hold Python's GIL in C code, or the program has "
                         "no ddplaunch heartbeats",
                         state, where);
  }
}

std::string describe_unanswering_process(int pid) {
  std::ifstream stat_file(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return describe_process_state(0, "");
  std::ifstream wchan_file(fmt::format("/proc/{}/wchan", pid));
  std::string wchan;
  std::getline(wchan_file, wchan);
  return describe_process_state(stat[close + 2], wchan);
}

}  // namespace ddp
