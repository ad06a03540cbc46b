#include "process/process_identity.h"

#include <fstream>
#include <sstream>
#include <string>

#include "process/process_alive.h"

namespace ddp {
namespace {

// The fields of /proc/PID/stat after the command name, which may hold spaces
// and parentheses: they start after the last ')'. Field 3 (state) is first.
std::optional<std::string> stat_fields(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) return std::nullopt;
  return text.substr(close + 2);
}

}  // namespace

std::optional<uint64_t> process_start_ticks(pid_t pid) {
  const auto fields = stat_fields(pid);
  if (!fields) return std::nullopt;
  std::istringstream in(*fields);
  std::string field;
  for (int n = 3; n <= 22 && in >> field; ++n) {
    if (n == 22) return field.find_first_not_of("0123456789") == std::string::npos && !field.empty() ? std::optional<uint64_t>(std::stoull(field)) : std::nullopt;
  }
  return std::nullopt;
}

bool same_process_running(pid_t pid, uint64_t start_ticks) {
  if (start_ticks == 0) return process_alive(pid);
  const auto fields = stat_fields(pid);
  if (!fields || fields->empty() || (*fields)[0] == 'Z' || (*fields)[0] == 'X') return false;
  return process_start_ticks(pid) == start_ticks;
}

}  // namespace ddp
