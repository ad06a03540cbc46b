// Every thread's stack of this process (health.h): a thread blocked in a
// known function of this file shows up by its qualified name, this file and a
// line inside the function; the main thread is marked; stacks.log has it all.

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "ddp/runtime/health.h"

namespace ddp_stacks_test {

int g_pipe[2] = {-1, -1};
std::atomic<bool> g_entered{false};

constexpr int kFirstLine = __LINE__;
// Always inlined into the function below: it must still show as a frame of
// its own, at its own line, with its caller at the line of the call.
__attribute__((always_inline)) inline ssize_t read_one_byte(char* c) {
  return read(g_pipe[0], c, 1);  // blocks until the test writes a byte
}

// noinline, and work after the read: the frame must stay a call of its own
// (no inlining into the thread's lambda, no tail call into read()).
__attribute__((noinline)) int blocked_in_known_function() {
  g_entered.store(true);
  char c = 0;
  ssize_t n;
  do {
    n = read_one_byte(&c);
  } while (n < 0 && errno == EINTR);
  asm volatile("" ::: "memory");
  return static_cast<int>(n) + c;
}
constexpr int kLastLine = __LINE__;

}  // namespace ddp_stacks_test

namespace {

using ddp::ProcessStacks;
using ddp::StackFrameInfo;
using ddp::ThreadStackInfo;

const char* kKnownFunction = "ddp_stacks_test::blocked_in_known_function()";

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ThreadStacksTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The log goes where the launcher points a rank: set before the first dump.
    log_dir_ = std::filesystem::temp_directory_path() / ("ddp_stacks_test." + std::to_string(getpid()));
    std::filesystem::create_directories(log_dir_);
    setenv("DDPLAUNCH_RANK_LOG_DIR", log_dir_.c_str(), 1);
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(log_dir_); }

  void SetUp() override {
    ASSERT_EQ(pipe(ddp_stacks_test::g_pipe), 0);
    ddp_stacks_test::g_entered = false;
    blocked_ = std::thread([] {
      pthread_setname_np(pthread_self(), "stacks-blocked");
      ddp_stacks_test::blocked_in_known_function();
    });
    while (!ddp_stacks_test::g_entered) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // into read()
  }
  void TearDown() override {
    const char byte = 0;
    ASSERT_EQ(write(ddp_stacks_test::g_pipe[1], &byte, 1), 1);
    blocked_.join();
    close(ddp_stacks_test::g_pipe[0]);
    close(ddp_stacks_test::g_pipe[1]);
  }

  static const ThreadStackInfo* find_thread(const ProcessStacks& s, const std::string& name) {
    for (const ThreadStackInfo& t : s.threads) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }

  static std::string describe(const ProcessStacks& s) { return ddp::format_thread_stacks(s); }

  static std::filesystem::path log_dir_;
  std::thread blocked_;
};

std::filesystem::path ThreadStacksTest::log_dir_;

TEST_F(ThreadStacksTest, NamesTheBlockedFunctionWithFileAndLine) {
  const ProcessStacks stacks = ddp::capture_all_thread_stacks();
  ASSERT_GE(stacks.threads.size(), 2u) << describe(stacks);

  // The main thread (this one: gtest runs tests there), marked and first.
  EXPECT_TRUE(stacks.threads.front().main) << describe(stacks);
  EXPECT_EQ(stacks.threads.front().tid, getpid());
  int mains = 0;
  for (const ThreadStackInfo& t : stacks.threads) mains += t.main ? 1 : 0;
  EXPECT_EQ(mains, 1) << describe(stacks);
  EXPECT_TRUE(stacks.threads.front().answered) << describe(stacks);
  EXPECT_FALSE(stacks.threads.front().frames.empty()) << describe(stacks);

  const ThreadStackInfo* blocked = find_thread(stacks, "stacks-blocked");
  ASSERT_NE(blocked, nullptr) << describe(stacks);
  EXPECT_FALSE(blocked->main);
  ASSERT_TRUE(blocked->answered) << blocked->note;
  ASSERT_FALSE(blocked->frames.empty());

  // The handler's frames are gone from every stack.
  for (const ThreadStackInfo& t : stacks.threads) {
    for (const StackFrameInfo& f : t.frames) {
      EXPECT_EQ(f.function.find("on_stack_signal"), std::string::npos) << describe(stacks);
    }
  }

  size_t known = blocked->frames.size();
  for (size_t i = 0; i < blocked->frames.size(); ++i) {
    if (blocked->frames[i].function == kKnownFunction) known = i;
  }
  ASSERT_LT(known, blocked->frames.size()) << describe(stacks);
  // Outermost first: the thread's entry comes before the known function,
  // the read() it waits in after it.
  EXPECT_GT(known, 0u) << describe(stacks);
  EXPECT_LT(known + 1, blocked->frames.size()) << describe(stacks);

  if (stacks.symbolizer != "libdw") GTEST_SKIP() << "built without libdw: no file:line to check";
  const StackFrameInfo& f = blocked->frames[known];
  EXPECT_EQ(std::filesystem::path(f.file).filename(), "thread_stacks_test.cpp") << describe(stacks);
  EXPECT_GT(f.line, ddp_stacks_test::kFirstLine) << describe(stacks);
  EXPECT_LT(f.line, ddp_stacks_test::kLastLine) << describe(stacks);
  // The inlined helper: the next frame in, at its own line above the caller's.
  ASSERT_LT(known + 1, blocked->frames.size());
  const StackFrameInfo& inlined = blocked->frames[known + 1];
  EXPECT_EQ(inlined.function, "ddp_stacks_test::read_one_byte(char*)") << describe(stacks);
  EXPECT_EQ(std::filesystem::path(inlined.file).filename(), "thread_stacks_test.cpp") << describe(stacks);
  EXPECT_GT(inlined.line, ddp_stacks_test::kFirstLine) << describe(stacks);
  EXPECT_LT(inlined.line, f.line) << describe(stacks);
}

TEST_F(ThreadStacksTest, DumpAppendsReadableStacksToTheRankLog) {
  const std::filesystem::path log = log_dir_ / "stacks.log";
  const ProcessStacks stacks = ddp::dump_all_thread_stacks();
  const std::string text = read_file(log);
  ASSERT_FALSE(text.empty()) << log;
  EXPECT_NE(text.find("ddp: every thread's stack (asked by ddplaunch) at "), std::string::npos) << text;
  EXPECT_NE(text.find("Thread stacks-blocked (tid "), std::string::npos) << text;
  EXPECT_NE(text.find(", main) (most recent call last):\n"), std::string::npos) << text;
  EXPECT_NE(text.find(std::string(" ") + kKnownFunction), std::string::npos) << text;
  if (stacks.symbolizer == "libdw") {
    EXPECT_NE(text.find(std::string(kKnownFunction) + " at "), std::string::npos) << text;
    EXPECT_NE(text.find("thread_stacks_test.cpp:"), std::string::npos) << text;
  }
  EXPECT_NE(text.find("  #0 "), std::string::npos) << text;

  // Appended: a second dump keeps the first.
  ddp::dump_all_thread_stacks();
  const std::string twice = read_file(log);
  EXPECT_GT(twice.size(), text.size());
  EXPECT_EQ(twice.compare(0, text.size(), text), 0);
  std::fprintf(stderr, "%s", text.c_str());  // a sample in the test's output
}

}  // namespace
