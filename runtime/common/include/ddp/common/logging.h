#pragma once
// One logging set-up for every ddplaunch program: spdlog to stderr, with the
// program's name in each line so it stands apart from the workers' output.

#include <string>

namespace ddp {

/// Installs the default logger. level: trace, debug, info, warn, error, off.
/// Call once from main() before any thread starts.
void init_logging(const std::string& program, const std::string& level = "info");

}  // namespace ddp
