#pragma once
// How a process ended, decoded from waitpid's status word.

#include <string>

namespace ddp {

struct ExitStatus {
  /// Exit code when the process exited; -1 when a signal ended it.
  int code = -1;
  /// Signal number when a signal ended it; 0 when it exited.
  int signal = 0;
  bool core_dumped = false;

  static ExitStatus exited(int code) { return {code, 0, false}; }
  static ExitStatus killed(int signo, bool core = false) { return {-1, signo, core}; }
  /// Decodes a waitpid() status word.
  static ExitStatus from_wait_status(int status);

  bool succeeded() const { return signal == 0 && code == 0; }
  /// What a shell would report: the code, or 128+signal.
  int shell_code() const { return signal != 0 ? 128 + signal : code; }
  /// "exit code 3" or "killed by SIGKILL (core dumped)".
  std::string describe() const;
};

/// "SIGKILL" for 9; "SIG<n>" for numbers without a name.
std::string signal_name(int signo);

}  // namespace ddp
