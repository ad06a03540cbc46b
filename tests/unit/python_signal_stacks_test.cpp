// The agent's way to a Python rank's stacks when its companion cannot answer:
// faulthandler's text parsed, and a real python3 process holding the GIL in C
// signalled and read through /proc/<pid>/fd.
#include "stacks/python_signal_stacks.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace ddp {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// faulthandler.dump_traceback(all_threads=True) of a program whose helper
// thread (started through threading) waits, signalled on the helper.
const char* kDump =
    "Thread 0x00007f0000000002 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
    "  File \"/home/u/train.py\", line 9 in helper\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 975 in run\n"
    "  File \"/usr/lib/python3.11/threading.py\", line 995 in _bootstrap\n"
    "\n"
    "Current thread 0x00007f0000000001 (most recent call first):\n"
    "  File \"/home/u/train.py\", line ??? in load\n"
    "  File \"/home/u/train.py\", line 30 in <module>\n";

TEST(PythonSignalStacks, FaulthandlersTextIsReadOutermostFirstWithTheMainThreadFound) {
  const std::vector<ThreadStack> threads = parse_faulthandler_dump(kDump);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_EQ(threads[0].name, "thread 0x00007f0000000002");
  EXPECT_FALSE(threads[0].main);
  ASSERT_EQ(threads[0].frames.size(), 4u);
  EXPECT_EQ(threads[0].frames.front().function, "_bootstrap");
  EXPECT_EQ(threads[0].frames.back().function, "wait");
  EXPECT_EQ(threads[0].frames.back().line, 320);
  EXPECT_TRUE(threads[1].main);
  ASSERT_EQ(threads[1].frames.size(), 2u);
  EXPECT_EQ(threads[1].frames[0].function, "<module>");
  EXPECT_EQ(threads[1].frames[1].function, "load");
  EXPECT_EQ(threads[1].frames[1].line, 0) << "faulthandler's ??? is an unknown line";
  EXPECT_EQ(threads[1].frames[1].file, "/home/u/train.py");
}

TEST(PythonSignalStacks, WithoutAMainLookingThreadTheSignalledOneIsMain) {
  const std::vector<ThreadStack> threads = parse_faulthandler_dump(
      "Current thread 0x1 (most recent call first):\n  <no Python frame>\n"
      "Thread 0x2 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 995 in _bootstrap\n");
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_TRUE(threads[0].main);
  EXPECT_TRUE(threads[0].frames.empty());
  EXPECT_FALSE(threads[1].main);
  EXPECT_TRUE(parse_faulthandler_dump("garbage\n  File \"x.py\", line 1 in f\n").empty());
  const auto huge = parse_faulthandler_dump(
      "Thread 0x3 (most recent call first):\n  File \"x.py\", line 99999999999999999999999 in f\n");
  ASSERT_EQ(huge.size(), 1u);
  EXPECT_EQ(huge[0].frames.at(0).line, 0) << "out of range: unknown, not an exception";
}

/// A python3 process started here, reaped at the end of the test.
class PythonProcess {
 public:
  explicit PythonProcess(const std::string& code) {
    static int made = 0;
    dir_ = fs::temp_directory_path() /
           ("ddp_sigstacks_" + std::to_string(::getpid()) + "_" + std::to_string(++made));
    fs::create_directories(dir_);
    script_ = dir_ / "holds_gil.py";
    std::ofstream(script_) << code;
    int out[2];
    if (::pipe(out) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], 1);
      ::close(out[0]);
      ::execl("/usr/bin/python3", "python3", script_.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(out[1]);
    ready_ = ::fdopen(out[0], "r");
  }
  ~PythonProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (ready_ != nullptr) ::fclose(ready_);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  /// Blocks until the program printed its first line.
  std::string first_line() {
    char line[256] = {};
    return ready_ != nullptr && ::fgets(line, sizeof line, ready_) != nullptr ? line : "";
  }
  int pid() const { return pid_; }
  std::string script() const { return script_.string(); }

 private:
  fs::path dir_, script_;
  pid_t pid_ = -1;
  FILE* ready_ = nullptr;
};

// As the companion arms a rank (signal_stacks.arm), then it blocks in C
// with the GIL held: no Python thread can run.
const char* kHoldsTheGil =
    "import ctypes, faulthandler, os, signal, sys\n"
    "fd = os.memfd_create('ddplaunch-stacks', os.MFD_CLOEXEC)\n"
    "faulthandler.register(signal.SIGRTMIN + 6, file=fd, all_threads=True)\n"
    "def blocks():\n"
    "    print('ready', flush=True)\n"
    "    while True: ctypes.PyDLL(None).sleep(60)  # the GIL stays held\n"
    "blocks()\n";

TEST(PythonSignalStacks, AProcessHoldingTheGilAnswersThroughFaulthandler) {
  PythonProcess p(kHoldsTheGil);
  ASSERT_EQ(p.first_line(), "ready\n");
  std::optional<std::vector<ThreadStack>> threads;
  // "ready" comes a line before the sleep: ask until the stack is there.
  const auto at_the_sleep = [&] {
    return threads && !threads->empty() && !threads->front().frames.empty() &&
           threads->front().frames.back().line == 6;
  };
  for (int i = 0; i < 50 && !at_the_sleep(); ++i) {
    threads = python_stacks_by_signal(p.pid(), 2s);
  }
  ASSERT_TRUE(threads.has_value());
  ASSERT_EQ(threads->size(), 1u);
  const ThreadStack& main = threads->front();
  EXPECT_TRUE(main.main);
  ASSERT_EQ(main.frames.size(), 2u);
  EXPECT_EQ(main.frames[0].function, "<module>");
  EXPECT_EQ(main.frames[1].function, "blocks");
  EXPECT_EQ(main.frames[1].file, p.script());
  EXPECT_EQ(main.frames[1].line, 6);
  EXPECT_EQ(main.frames[1].code, "while True: ctypes.PyDLL(None).sleep(60)  # the GIL stays held");
  EXPECT_EQ(::kill(p.pid(), 0), 0) << "the signal must not end it";
}

TEST(PythonSignalStacks, AProcessNotArmedOrStoppedIsNotSignalled) {
  PythonProcess unarmed("import time\nprint('ready', flush=True)\ntime.sleep(60)\n");
  ASSERT_EQ(unarmed.first_line(), "ready\n");
  EXPECT_FALSE(python_stacks_by_signal(unarmed.pid(), 200ms).has_value());
  int status = 0;
  EXPECT_EQ(::waitpid(unarmed.pid(), &status, WNOHANG), 0) << "SIGRTMIN+6's default action would have ended it";

  PythonProcess stopped(kHoldsTheGil);
  ASSERT_EQ(stopped.first_line(), "ready\n");
  ::kill(stopped.pid(), SIGSTOP);
  ASSERT_EQ(::waitpid(stopped.pid(), &status, WUNTRACED), stopped.pid());
  EXPECT_FALSE(python_stacks_by_signal(stopped.pid(), 200ms).has_value());
  EXPECT_FALSE(python_stacks_by_signal(0, 200ms).has_value());
}

}  // namespace
}  // namespace ddp
