#include "ddp/runtime/health.h"

#include <dirent.h>
#include <fcntl.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace ddp {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One thread writes its stack at a time, so the dump is not interleaved.
std::atomic_flag g_dump_lock = ATOMIC_FLAG_INIT;
// Where the stacks go: the rank's log directory's stacks.log under ddplaunch
// (kept open: threads write to it whenever their signal arrives), else stderr.
std::atomic<int> g_dump_fd{STDERR_FILENO};

int stack_signal() { return SIGRTMIN + 5; }

void write_all(int fd, const char* text, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, text, n);
    if (w <= 0) return;
    text += w;
    n -= static_cast<size_t>(w);
  }
}

// backtrace() is not formally async-signal-safe, but it is what every
// in-process stack dumper uses (glibc loads libgcc before, in install()).
void on_stack_signal(int) {
  const int saved = errno;
  while (g_dump_lock.test_and_set(std::memory_order_acquire)) {
  }
  char header[64];
  const int n = std::snprintf(header, sizeof header, "---- thread %ld ----\n", static_cast<long>(syscall(SYS_gettid)));
  const int fd = g_dump_fd.load();
  write_all(fd, header, static_cast<size_t>(n));
  void* frames[64];
  const int depth = backtrace(frames, 64);
  backtrace_symbols_fd(frames, depth, fd);
  g_dump_lock.clear(std::memory_order_release);
  errno = saved;
}

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    void* warm[1];
    backtrace(warm, 1);  // loads the unwinder now, not inside the handler
    struct sigaction sa {};
    sa.sa_handler = on_stack_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(stack_signal(), &sa, nullptr);
    if (const char* dir = std::getenv("DDPLAUNCH_RANK_LOG_DIR"); dir != nullptr && *dir != '\0') {
      const std::string path = std::string(dir) + "/stacks.log";
      const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd >= 0) {
        g_dump_fd = fd;
        const std::string note = "ddp: every thread's stack goes to " + path + " (asked by ddplaunch)\n";
        write_all(STDERR_FILENO, note.c_str(), note.size());
      }
    }
  });
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

void TrainingProgress::add_wait(double seconds) {
  // One writer (the training thread): load + store is enough.
  waited_seconds_.store(waited_seconds_.load(std::memory_order_relaxed) + seconds, std::memory_order_relaxed);
}

void dump_all_thread_stacks() {
  install();
  const char* header = "ddp: every thread's stack (asked by ddplaunch before stopping a hung job)\n";
  write_all(g_dump_fd.load(), header, std::strlen(header));
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return;
  while (dirent* e = readdir(tasks)) {
    if (e->d_name[0] == '.') continue;
    syscall(SYS_tgkill, getpid(), std::atoi(e->d_name), stack_signal());
  }
  closedir(tasks);
}

}  // namespace ddp
