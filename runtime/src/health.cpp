#include "ddp/runtime/health.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <limits>
#include <mutex>
#include <string>

#include "stack_symbolizer.h"
#include "thread_stacks.h"

namespace ddp {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void write_all(int fd, const char* text, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

// Where the stacks go: the rank's log directory's stacks.log under ddplaunch
// (opened on the first dump, kept open, appended to), else stderr.
int stacks_log_fd() {
  static std::once_flag once;
  static int fd = STDERR_FILENO;
  std::call_once(once, [] {
    const char* dir = std::getenv("DDPLAUNCH_RANK_LOG_DIR");
    if (dir == nullptr || *dir == '\0') return;
    const std::string path = std::string(dir) + "/stacks.log";
    const int opened = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (opened < 0) return;
    fd = opened;
    const std::string note = "ddp: every thread's stack goes to " + path + " (asked by ddplaunch)\n";
    write_all(STDERR_FILENO, note.c_str(), note.size());
  });
  return fd;
}

std::string utc_time(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char text[64];
  const size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(unix_ms % 1000));
  return text;
}

}  // namespace

const char* to_string(Phase phase) {
  switch (phase) {
    case Phase::kData: return "data";
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kCheckpoint: return "checkpoint";
    case Phase::kOther: return "other";
    case Phase::kUnknown: break;
  }
  return "unknown";
}

void TrainingProgress::begin_step(int64_t step) {
  step_started_ns_.store(now_ns(), std::memory_order_relaxed);
  waited_seconds_.store(0, std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
}

void TrainingProgress::end_step() {
  const int64_t started = step_started_ns_.load(std::memory_order_relaxed);
  if (started == 0) return;
  const double seconds = static_cast<double>(now_ns() - started) / 1e9;
  step_seconds_.store(seconds, std::memory_order_relaxed);
  busy_seconds_.store(std::max(0.0, seconds - waited_seconds_.load(std::memory_order_relaxed)),
                      std::memory_order_relaxed);
}

std::string TrainingProgress::stop_file_from_environment() {
  const char* path = std::getenv("DDPLAUNCH_STOP_FILE");
  return path != nullptr ? path : "";
}

bool TrainingProgress::stop_requested() const {
  int64_t at = stop_at_.load(std::memory_order_relaxed);
  if (at == kNotAsked) {
    if (stop_file_.empty()) return false;
    std::ifstream in(stop_file_);
    if (!in) return false;  // no request (the launcher renames it into place whole)
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::optional<int64_t> parsed = parse_stop_at_step(text);
    if (!parsed) return false;
    at = *parsed;
    stop_at_.store(at, std::memory_order_relaxed);
  }
  return at < 0 || step_.load(std::memory_order_relaxed) + 1 >= at;
}

std::optional<int64_t> parse_stop_at_step(const std::string& text) {
  const std::string key = "\"stop_at_step\"";
  size_t i = text.find(key);
  if (i == std::string::npos) return std::nullopt;
  i += key.size();
  auto skip_space = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
  };
  skip_space();
  if (i >= text.size() || text[i] != ':') return std::nullopt;
  ++i;
  skip_space();
  if (text.compare(i, 4, "null") == 0) return -1;
  // Every digit counts: stopping after some of them would read another step.
  // More than an int64 holds is no step ddplaunch wrote.
  int64_t value = 0;
  size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i, ++digits) {
    const int digit = text[i] - '0';
    if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (digits == 0) return std::nullopt;
  return value;
}

void TrainingProgress::add_wait(double seconds) {
  // One writer (the training thread): load + store is enough.
  waited_seconds_.store(waited_seconds_.load(std::memory_order_relaxed) + seconds, std::memory_order_relaxed);
}

ProcessStacks capture_all_thread_stacks(std::chrono::milliseconds wait) {
  ProcessStacks stacks;
  stacks.unix_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  stacks.symbolizer = StackSymbolizer::backend();
  const std::vector<RawThreadStack> raw = capture_thread_stacks(wait);
  // After the capture: the threads are running again while this reads
  // symbol tables and debug information.
  StackSymbolizer symbolizer;
  stacks.threads.reserve(raw.size());
  for (const RawThreadStack& r : raw) {
    ThreadStackInfo t;
    t.name = r.name;
    t.tid = r.tid;
    t.main = r.main;
    t.answered = r.answered;
    t.note = r.why_not;
    if (r.answered) t.frames = symbolizer.symbolize(r.pcs);
    stacks.threads.push_back(std::move(t));
  }
  return stacks;
}

std::string format_thread_stacks(const ProcessStacks& stacks) {
  std::string out = "ddp: every thread's stack (asked by ddplaunch) at " + utc_time(stacks.unix_ms) + ": pid " +
                    std::to_string(getpid()) + ", " + std::to_string(stacks.threads.size()) + " threads, symbolized with " +
                    stacks.symbolizer + "\n";
  for (const ThreadStackInfo& t : stacks.threads) {
    out += "Thread " + t.name + " (tid " + std::to_string(t.tid) + (t.main ? ", main" : "") + ")";
    if (!t.answered) {
      out += ": no stack: " + t.note + "\n";
      continue;
    }
    out += " (most recent call last):\n";
    // Outermost first, numbered down to #0 where the thread is now.
    size_t k = t.frames.size();
    for (const StackFrameInfo& f : t.frames) {
      out += "  #" + std::to_string(--k) + " " + (f.function.empty() ? std::string("??") : f.function);
      if (f.line > 0) {
        out += " at " + f.file + ":" + std::to_string(f.line);
      } else if (!f.file.empty()) {
        out += " in " + f.file;
      }
      out += "\n";
    }
  }
  out += "\n";
  return out;
}

ProcessStacks dump_all_thread_stacks() {
  // One dump at a time, so two never interleave in stacks.log.
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  const int fd = stacks_log_fd();
  ProcessStacks stacks = capture_all_thread_stacks();
  const std::string text = format_thread_stacks(stacks);
  write_all(fd, text.data(), text.size());
  return stacks;
}

}  // namespace ddp
