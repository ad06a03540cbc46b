#include "metrics/proc_sampler.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace ddp {
namespace {

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<uint64_t> to_u64(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || s[0] == '-') return std::nullopt;
  return static_cast<uint64_t>(v);
}

// "VmRSS:\t  1234 kB" -> 1234 (the first number after the name).
std::optional<uint64_t> status_value(const std::string& status, const std::string& name) {
  const std::string key = "\n" + name + ":";
  const std::string text = "\n" + status;
  const size_t at = text.find(key);
  if (at == std::string::npos) return std::nullopt;
  std::istringstream line(text.substr(at + key.size(), text.find('\n', at + 1) - at - key.size()));
  std::string number;
  line >> number;
  return to_u64(number);
}

}  // namespace

std::optional<std::vector<std::string>> split_proc_stat(const std::string& line) {
  // The command name is in parentheses and may hold spaces and parentheses
  // itself: the fields start after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos || line.find('(') == std::string::npos) return std::nullopt;
  std::istringstream in(line.substr(close + 1));
  std::vector<std::string> fields;
  for (std::string f; in >> f;) fields.push_back(std::move(f));
  if (fields.size() < 20) return std::nullopt;  // up to starttime (field 22)
  return fields;
}

ProcSampler::ProcSampler(std::string proc_root, const Clock& clock, long ticks_per_second, long page_size)
    : root_(std::move(proc_root)),
      clock_(clock),
      hz_(ticks_per_second > 0 ? ticks_per_second : sysconf(_SC_CLK_TCK)),
      page_size_(page_size > 0 ? page_size : sysconf(_SC_PAGESIZE)) {
  if (hz_ <= 0) hz_ = 100;
  if (page_size_ <= 0) page_size_ = 4096;
}

std::optional<double> ProcSampler::seconds_since_boot() const {
  const auto text = read_file(root_ + "/uptime");
  if (!text) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(text->c_str(), &end);
  if (end == text->c_str() || v <= 0) return std::nullopt;
  return v;
}

int ProcSampler::parent_of(int pid) const {
  const auto stat = read_file(root_ + "/" + std::to_string(pid) + "/stat");
  if (!stat) return 0;
  const auto fields = split_proc_stat(*stat);
  if (!fields) return 0;
  return static_cast<int>(to_u64((*fields)[1]).value_or(0));
}

std::optional<ProcessSample> ProcSampler::sample(int pid) {
  if (pid <= 0) return std::nullopt;
  const std::string dir = root_ + "/" + std::to_string(pid);
  const auto stat = read_file(dir + "/stat");
  if (!stat) return std::nullopt;
  const auto fields = split_proc_stat(*stat);
  if (!fields) return std::nullopt;
  const auto& f = *fields;  // f[k] is field k + 3 of proc(5)
  ProcessSample s;
  s.pid = pid;
  s.state = f[0].empty() ? '?' : f[0][0];
  s.ppid = static_cast<int>(to_u64(f[1]).value_or(0));
  const auto utime = to_u64(f[11]);
  const auto stime = to_u64(f[12]);
  const auto start = to_u64(f[19]);
  if (!utime || !stime || !start) return std::nullopt;
  s.cpu_ticks = *utime + *stime;
  s.start_ticks = *start;
  if (const auto n = to_u64(f[17])) s.threads = static_cast<int>(*n);
  if (f.size() > 21) {
    if (const auto pages = to_u64(f[21])) s.rss_bytes = *pages * static_cast<uint64_t>(page_size_);
  }
  // status has the context switches, and RSS and threads in plainer form.
  if (const auto status = read_file(dir + "/status")) {
    if (const auto kb = status_value(*status, "VmRSS")) s.rss_bytes = *kb * 1024;
    if (const auto n = status_value(*status, "Threads")) s.threads = static_cast<int>(*n);
    s.voluntary_ctx_switches = status_value(*status, "voluntary_ctxt_switches");
    s.nonvoluntary_ctx_switches = status_value(*status, "nonvoluntary_ctxt_switches");
  }
  // Readable by the process's parent (the agent); the same "name: value" lines.
  if (const auto io = read_file(dir + "/io")) {
    s.written_bytes = status_value(*io, "wchar");
    s.dirtied_bytes = status_value(*io, "write_bytes");
  }

  const SteadyTime now = clock_.now();
  const double hz = static_cast<double>(hz_);
  auto prev = previous_.find(pid);
  if (prev != previous_.end() && prev->second.start_ticks == s.start_ticks) {
    const Duration dt = now - prev->second.at;
    if (dt < kMinCpuWindow || s.cpu_ticks < prev->second.cpu_ticks) {
      // Too short a window for whole ticks (one tick in a millisecond would
      // read as 1,000%): the last figure stands, and the older reference
      // point is kept so that the next delta spans real time.
      s.cpu_percent = prev->second.cpu_percent;
      return s;
    }
    s.cpu_percent = 100.0 * static_cast<double>(s.cpu_ticks - prev->second.cpu_ticks) / hz /
                    std::chrono::duration<double>(dt).count();
  } else if (const auto up = seconds_since_boot()) {
    const double lived = *up - static_cast<double>(s.start_ticks) / hz;
    if (lived > 0) s.cpu_percent = 100.0 * static_cast<double>(s.cpu_ticks) / hz / lived;
  }
  previous_[pid] = Previous{s.start_ticks, s.cpu_ticks, now, s.cpu_percent};
  return s;
}

void ProcSampler::forget_others(const std::set<int>& pids) {
  for (auto it = previous_.begin(); it != previous_.end();) {
    it = pids.count(it->first) != 0 ? std::next(it) : previous_.erase(it);
  }
}

}  // namespace ddp
