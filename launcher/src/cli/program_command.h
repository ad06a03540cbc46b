#pragma once
// Turns PROGRAM [ARGS...] into the argv a worker executes, as torchrun does:
// a .py file runs under `python -u`, -m MODULE runs `python -u -m MODULE`,
// --no-python runs PROGRAM as is, --run-path runs the Python file PROGRAM
// through runpy.run_path (and wins over the others). Checks up front that it can run, so a typo
// is a usage error instead of N failing workers.

#include <optional>
#include <string>
#include <vector>

namespace ddp {

struct CommandInputs {
  std::vector<std::string> command;  // PROGRAM ARGS...
  bool module = false;
  bool no_python = false;
  std::optional<std::string> python_exec;  // $PYTHON_EXEC
  std::optional<std::string> path;         // $PATH
  bool run_path = false;
};

/// Throws UsageError naming PROGRAM when it cannot be found or run.
std::vector<std::string> resolve_command(const CommandInputs& in);

/// Finds an executable by name in path (or checks a name containing '/').
std::optional<std::string> find_executable(const std::string& name, const std::optional<std::string>& path);

}  // namespace ddp
