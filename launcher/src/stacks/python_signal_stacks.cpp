#include "stacks/python_signal_stacks.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

namespace ddp {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxDumpBytes = 1 << 20;
constexpr auto kPoll = std::chrono::milliseconds(5);

/// /proc/<pid>/fd/<n> of the companion's memory file, or "".
std::string memfd_path(int pid) {
  const std::string wanted = fmt::format("/memfd:{} ", kPythonStackMemfdName);
  std::error_code ec;
  for (fs::directory_iterator it(fmt::format("/proc/{}/fd", pid), ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code link_ec;
    const fs::path target = fs::read_symlink(it->path(), link_ec);
    if (!link_ec && target.string().rfind(wanted, 0) == 0) return it->path().string();
  }
  return {};
}

/// The process's state letter and whether it catches `signal`; state 0 when gone.
std::pair<char, bool> state_and_catches(int pid, int signal) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  char state = 0;
  bool catches = false;
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("State:", 0) == 0) {
      const size_t letter = line.find_first_not_of(" \t", 6);
      if (letter != std::string::npos) state = line[letter];
    } else if (line.rfind("SigCgt:", 0) == 0) {
      const uint64_t mask = std::strtoull(line.c_str() + 7, nullptr, 16);  // 0 where unreadable
      catches = (mask >> (signal - 1)) & 1u;
    }
  }
  return {state, catches};
}

off_t size_of(int fd) {
  struct stat st {};
  return ::fstat(fd, &st) == 0 ? st.st_size : -1;
}

std::string read_from(int fd, off_t offset) {
  std::string text(kMaxDumpBytes, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, offset + static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  text.resize(got);
  return text;
}

/// Closes a file descriptor when it goes.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

/// The text of each frame's source line (the agent shares the rank's files),
/// trimmed, as the companion sends it.
void fill_source_lines(std::vector<ThreadStack>& threads) {
  std::map<std::string, std::vector<std::string>> files;
  for (ThreadStack& t : threads) {
    for (StackFrame& f : t.frames) {
      if (f.line <= 0 || f.file.empty() || f.file[0] == '<') continue;
      auto [it, added] = files.try_emplace(f.file);
      if (added) {
        std::ifstream in(f.file);
        for (std::string line; it->second.size() < 100000 && std::getline(in, line);) it->second.push_back(line);
      }
      if (static_cast<size_t>(f.line) > it->second.size()) continue;
      const std::string& line = it->second[static_cast<size_t>(f.line) - 1];
      const size_t first = line.find_first_not_of(" \t");
      const size_t last = line.find_last_not_of(" \t\r");
      if (first != std::string::npos) f.code = line.substr(first, std::min<size_t>(last - first + 1, 240));
    }
  }
}

bool begins_in_threading_bootstrap(const ThreadStack& t) {
  if (t.frames.empty()) return false;
  const StackFrame& outermost = t.frames.front();
  return outermost.function == "_bootstrap" && outermost.file.size() >= 12 &&
         outermost.file.compare(outermost.file.size() - 12, 12, "threading.py") == 0;
}

}  // namespace

int python_stack_signal() { return SIGRTMIN + 6; }

std::vector<ThreadStack> parse_faulthandler_dump(const std::string& text) {
  static const std::regex thread_re(R"(^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):$)");
  static const std::regex frame_re(R"re(^  File "(.*)", line (\d+|\?\?\?) in (.*)$)re");
  std::vector<ThreadStack> threads;
  std::vector<bool> signalled;
  std::istringstream in(text);
  std::smatch m;
  for (std::string line; std::getline(in, line);) {
    if (std::regex_match(line, m, thread_re)) {
      ThreadStack t;
      t.name = "thread " + m[2].str();
      threads.push_back(std::move(t));
      signalled.push_back(m[1].str() == "Current thread");
    } else if (!threads.empty() && std::regex_match(line, m, frame_re)) {
      StackFrame f;
      f.file = m[1].str();
      // The text is the rank's to write: a number out of range reads as unknown.
      const long line_number = m[2].str() == "???" ? 0 : std::strtol(m[2].str().c_str(), nullptr, 10);
      f.line = line_number > 0 && line_number <= INT32_MAX ? static_cast<int>(line_number) : 0;
      f.function = m[3].str();
      threads.back().frames.push_back(std::move(f));
    }
  }
  for (ThreadStack& t : threads) std::reverse(t.frames.begin(), t.frames.end());
  auto main = std::find_if(threads.begin(), threads.end(),
                           [](const ThreadStack& t) { return !t.frames.empty() && !begins_in_threading_bootstrap(t); });
  if (main == threads.end()) {
    const auto at = std::find(signalled.begin(), signalled.end(), true);
    if (at != signalled.end()) main = threads.begin() + (at - signalled.begin());
  }
  if (main != threads.end()) main->main = true;
  return threads;
}

std::optional<std::vector<ThreadStack>> python_stacks_by_signal(int pid, Duration wait) {
  if (pid <= 0) return std::nullopt;
  const std::string path = memfd_path(pid);
  if (path.empty()) return std::nullopt;
  const int signal = python_stack_signal();
  const auto [state, catches] = state_and_catches(pid, signal);
  if (!catches || (state != 'R' && state != 'S')) return std::nullopt;
  // Opened before the signal: our own reference to the memory file, readable
  // even when the process ends right after writing (its sleep was cut short).
  const FdCloser file{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) return std::nullopt;
  const off_t before = size_of(file.fd);
  if (before < 0 || ::kill(pid, signal) != 0) return std::nullopt;
  // Written: grown, and the same size at two looks in a row.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  off_t last = before;
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(kPoll);
    const off_t size = size_of(file.fd);
    if (size > before && size == last) {
      std::vector<ThreadStack> threads = parse_faulthandler_dump(read_from(file.fd, before));
      if (threads.empty()) return std::nullopt;
      fill_source_lines(threads);
      return threads;
    }
    last = size;
  }
  return std::nullopt;
}

}  // namespace ddp
