#include "report/oom_probe.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace ddp {
namespace {

// Lines of /proc/self/cgroup: "0::/path" (v2) or "4:memory:/path" (v1).
std::optional<std::string> cgroup_path(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    if (line.substr(first + 1, second - first - 1) == controller) return line.substr(second + 1);
  }
  return std::nullopt;
}

}  // namespace

OomProbe OomProbe::for_current_process() {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (auto v1 = cgroup_path("memory")) {
    const fs::path file = fs::path("/sys/fs/cgroup/memory") / fs::path(*v1).relative_path() / "memory.oom_control";
    if (fs::exists(file, ec)) return OomProbe(file.string());
  }
  if (auto v2 = cgroup_path("")) {
    const fs::path file = fs::path("/sys/fs/cgroup") / fs::path(*v2).relative_path() / "memory.events";
    if (fs::exists(file, ec)) return OomProbe(file.string());
  }
  return OomProbe("");
}

std::optional<uint64_t> OomProbe::kills() const {
  if (file_.empty()) return std::nullopt;
  std::ifstream in(file_);
  std::string key;
  uint64_t value = 0;
  // Both files are "key value" lines; v1 names it oom_kill too (kernel >= 4.13).
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return std::nullopt;
}

}  // namespace ddp
