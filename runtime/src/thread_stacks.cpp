#include "thread_stacks.h"

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>

namespace ddp {
namespace {

// Deeper stacks keep their innermost frames (where the thread is stuck).
constexpr int kMaxFrames = 128;

// One thread's answer. The handler writes depth, interrupted_pc and frames,
// then publishes tid (release); the requester reads a slot only once its tid
// is non-zero (acquire), so it never sees a half-written one.
struct Slot {
  std::atomic<int> tid{0};
  int depth = 0;
  uintptr_t interrupted_pc = 0;
  void* frames[kMaxFrames];
};

// One capture. Allocated by the requester before any signal goes out: the
// handler only claims a slot with an atomic increment (no allocation there).
struct Request {
  explicit Request(size_t n) : capacity(n), slots(new Slot[n]) {}
  const size_t capacity;
  std::unique_ptr<Slot[]> slots;
  std::atomic<size_t> claimed{0};   // slots handed out
  std::atomic<size_t> answered{0};  // slots published: what the requester polls
};

// The handler touches nothing but these atomics and its slot: lock-free
// atomics are safe in a signal handler, a mutex is not.
static_assert(std::atomic<Request*>::is_always_lock_free && std::atomic<size_t>::is_always_lock_free &&
                  std::atomic<int>::is_always_lock_free,
              "the stack signal handler needs lock-free atomics");

// The capture in progress, or null (a late answer to a finished one is dropped).
std::atomic<Request*> g_request{nullptr};
// Handlers running now. A handler counts itself in before it reads g_request,
// so once the requester has cleared g_request and seen this at zero, no
// handler can still reach the request and it may be freed.
std::atomic<int> g_in_handler{0};

int stack_signal() { return SIGRTMIN + 5; }

// Where the signal interrupted the thread: the first frame of its own stack,
// below the handler and the kernel's signal trampoline, which are dropped.
uintptr_t interrupted_pc(const void* context) {
  const auto* uc = static_cast<const ucontext_t*>(context);
#if defined(__x86_64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  return static_cast<uintptr_t>(uc->uc_mcontext.pc);
#else
  (void)uc;
  return 0;  // unknown here: the first two frames are dropped instead
#endif
}

// backtrace() is not formally async-signal-safe, but with the unwinder
// loaded beforehand (install_handler) it neither allocates nor locks in
// practice; every in-process stack dumper relies on that. syscall() and the
// atomics are safe.
void on_stack_signal(int, siginfo_t*, void* context) {
  const int saved_errno = errno;
  g_in_handler.fetch_add(1);
  if (Request* r = g_request.load()) {
    const size_t i = r->claimed.fetch_add(1);
    if (i < r->capacity) {
      Slot& slot = r->slots[i];
      slot.interrupted_pc = interrupted_pc(context);
      slot.depth = backtrace(slot.frames, kMaxFrames);
      slot.tid.store(static_cast<int>(syscall(SYS_gettid)), std::memory_order_release);
      r->answered.fetch_add(1, std::memory_order_release);
    }
  }
  g_in_handler.fetch_sub(1);
  errno = saved_errno;
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The first backtrace() loads the unwinder (dlopen, malloc): do it here,
    // never for the first time inside the handler.
    void* warm[1];
    backtrace(warm, 1);
    struct sigaction sa {};
    sa.sa_sigaction = on_stack_signal;
    // SA_RESTART: a thread interrupted in a blocking call resumes it.
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(stack_signal(), &sa, nullptr);
  });
}

struct Task {
  int tid = 0;
  std::string name;
  char state = '?';
  bool blocks_signal = false;
};

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Its name, and what tells beforehand that it cannot answer: stopped, or the
// signal blocked (such threads are not waited for).
Task describe_task(int tid) {
  const std::string dir = "/proc/self/task/" + std::to_string(tid);
  Task t;
  t.tid = tid;
  t.name = first_line(dir + "/comm");
  std::ifstream status(dir + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("State:", 0) == 0) {
      const size_t at = line.find_first_not_of(" \t", 6);
      if (at != std::string::npos) t.state = line[at];
    } else if (line.rfind("SigBlk:", 0) == 0) {
      const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
      t.blocks_signal = ((mask >> (stack_signal() - 1)) & 1ULL) != 0;
    }
  }
  return t;
}

std::vector<Task> list_tasks() {
  std::vector<Task> tasks;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return tasks;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tasks.push_back(describe_task(std::atoi(e->d_name)));
  }
  closedir(dir);
  return tasks;
}

// The thread's own frames: from the interrupted PC outwards, the handler and
// the signal trampoline above it dropped.
std::vector<uintptr_t> own_frames(const Slot& slot) {
  const int depth = std::clamp(slot.depth, 0, kMaxFrames);
  int first = -1;
  for (int i = 0; slot.interrupted_pc != 0 && i < depth; ++i) {
    if (reinterpret_cast<uintptr_t>(slot.frames[i]) == slot.interrupted_pc) {
      first = i;
      break;
    }
  }
  if (first < 0) first = std::min(depth, 2);  // the handler, then the trampoline
  std::vector<uintptr_t> pcs;
  pcs.reserve(static_cast<size_t>(depth - first));
  for (int i = first; i < depth; ++i) pcs.push_back(reinterpret_cast<uintptr_t>(slot.frames[i]));
  return pcs;
}

}  // namespace

std::vector<RawThreadStack> capture_thread_stacks(std::chrono::milliseconds wait) {
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  install_handler();

  const pid_t pid = getpid();
  std::vector<Task> tasks = list_tasks();
  // Room for every thread twice: a thread that missed an earlier capture's
  // deadline may still have that signal queued and answer twice.
  auto* request = new Request(2 * tasks.size() + 8);
  g_request.store(request);

  std::vector<RawThreadStack> out;
  out.reserve(tasks.size());
  size_t pending = 0;
  for (const Task& task : tasks) {
    RawThreadStack s;
    s.tid = task.tid;
    s.name = task.name.empty() ? "thread " + std::to_string(task.tid) : task.name;
    s.main = task.tid == pid;
    if (task.state == 'Z' || task.state == 'X') continue;  // exiting
    if (task.state == 'T' || task.state == 't') {
      s.why_not = "stopped: it cannot answer";
    } else if (task.blocks_signal) {
      s.why_not = "it blocks the stack signal";
    } else if (syscall(SYS_tgkill, pid, task.tid, stack_signal()) != 0) {
      if (errno == ESRCH) continue;  // exited since the listing
      s.why_not = std::string("could not be signalled: ") + std::strerror(errno);
    } else {
      ++pending;  // answered stays false until its slot comes in
    }
    out.push_back(std::move(s));
  }

  std::vector<bool> consumed(request->capacity, false);
  auto collect = [&] {
    const size_t claimed = std::min(request->claimed.load(), request->capacity);
    for (size_t i = 0; i < claimed; ++i) {
      if (consumed[i]) continue;
      const Slot& slot = request->slots[i];
      const int tid = slot.tid.load(std::memory_order_acquire);
      if (tid == 0) continue;  // claimed, still being written
      consumed[i] = true;
      for (RawThreadStack& s : out) {
        if (s.tid != tid || s.answered || !s.why_not.empty()) continue;
        s.answered = true;
        s.pcs = own_frames(slot);
        --pending;
      }
    }
  };

  // Poll: the answers come from signal handlers, which cannot notify a
  // condition variable. 1 ms steps keep the dump quick when all answer fast.
  const auto deadline = std::chrono::steady_clock::now() + wait;
  size_t seen = 0;
  while (pending > 0) {
    const size_t answered = request->answered.load(std::memory_order_acquire);
    if (answered != seen) {
      seen = answered;
      collect();
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  // Close the request; free it once no handler can be inside it. A handler
  // that does not leave within the grace period (its thread was stopped
  // mid-handler) keeps it: leaked rather than freed under its feet.
  g_request.store(nullptr);
  const auto grace = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (g_in_handler.load() != 0 && std::chrono::steady_clock::now() < grace) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  collect();
  if (g_in_handler.load() == 0) delete request;

  const std::string late = "no answer within " + std::to_string(wait.count()) +
                           " ms (in an uninterruptible call, or not scheduled)";
  for (RawThreadStack& s : out) {
    if (!s.answered && s.why_not.empty()) s.why_not = late;
  }
  std::stable_sort(out.begin(), out.end(), [](const RawThreadStack& a, const RawThreadStack& b) {
    if (a.main != b.main) return a.main;
    return a.tid < b.tid;
  });
  return out;
}

}  // namespace ddp
