#include "cli/program_command.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "cli/usage_error.h"

namespace ddp {
namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_regular_file(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_executable_file(const std::string& path) { return is_regular_file(path) && access(path.c_str(), X_OK) == 0; }

std::string python_of(const CommandInputs& in) {
  const std::string python = in.python_exec.value_or("python3");
  if (!find_executable(python, in.path)) {
    throw UsageError(fmt::format("Python interpreter '{}' not found (set PYTHON_EXEC or use --no-python)", python));
  }
  return python;
}

void require_readable_file(const std::string& program) {
  if (!is_regular_file(program)) throw UsageError(fmt::format("PROGRAM '{}' not found", program));
  if (access(program.c_str(), R_OK) != 0) throw UsageError(fmt::format("PROGRAM '{}' is not readable", program));
}

}  // namespace

std::optional<std::string> find_executable(const std::string& name, const std::optional<std::string>& path) {
  if (name.find('/') != std::string::npos) {
    return is_executable_file(name) ? std::optional<std::string>(name) : std::nullopt;
  }
  std::stringstream dirs(path.value_or("/usr/local/bin:/usr/bin:/bin"));
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (is_executable_file(candidate)) return candidate;
  }
  return std::nullopt;
}

std::vector<std::string> resolve_command(const CommandInputs& in) {
  const std::string& program = in.command.at(0);
  const std::vector<std::string> args(in.command.begin() + 1, in.command.end());
  std::vector<std::string> argv;

  if (in.run_path) {
    require_readable_file(program);
    // torchrun's run_script_path: the script runs as __main__ with its own argv.
    argv = {python_of(in), "-u", "-c",
            "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')", program};
  } else if (in.module) {
    if (in.no_python) throw UsageError("-m/--module and --no-python cannot be combined");
    argv = {python_of(in), "-u", "-m", program};
  } else if (!in.no_python && ends_with(program, ".py")) {
    require_readable_file(program);
    argv = {python_of(in), "-u", program};
  } else {
    const bool has_slash = program.find('/') != std::string::npos;
    if (!find_executable(program, in.path)) {
      if (has_slash && is_regular_file(program)) {
        throw UsageError(fmt::format("PROGRAM '{}' is not executable", program));
      }
      throw UsageError(fmt::format("PROGRAM '{}' not found{}", program, has_slash ? "" : " in PATH"));
    }
    argv = {program};
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

}  // namespace ddp
