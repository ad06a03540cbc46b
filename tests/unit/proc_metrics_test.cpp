// Per-rank resource metrics from /proc (metrics/proc_sampler.h): a fake /proc
// tree written by the test and a FakeClock, so CPU% comes from known tick
// counts over known time and nothing sleeps.
#include "metrics/proc_sampler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "ddp/common/clock.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr long kHz = 100;  // ticks per second in the fake tree
constexpr long kPage = 4096;

class FakeProc {
 public:
  FakeProc() : root_(fs::temp_directory_path() / ("ddp-fake-proc-" + std::to_string(std::random_device{}()))) {
    fs::create_directories(root_);
    uptime(1000.0);
  }
  ~FakeProc() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  std::string root() const { return root_.string(); }
  void uptime(double seconds) { write(root_ / "uptime", std::to_string(seconds) + " 1234.00\n"); }
  /// A process named `comm` (may hold spaces and parentheses), with its CPU ticks.
  void process(int pid, int ppid, uint64_t utime, uint64_t stime, uint64_t start_ticks, const std::string& comm = "python3",
               char state = 'S', int threads = 4, uint64_t rss_pages = 256) {
    fs::create_directories(root_ / std::to_string(pid));
    // Fields 1..24 of proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime vsize rss ...
    const std::string stat = std::to_string(pid) + " (" + comm + ") " + state + " " + std::to_string(ppid) +
                             " 1 1 0 -1 4194304 100 0 0 0 " + std::to_string(utime) + " " + std::to_string(stime) +
                             " 7 8 20 0 " + std::to_string(threads) + " 0 " + std::to_string(start_ticks) +
                             " 123456789 " + std::to_string(rss_pages) + " 18446744073709551615 1 1 0 0 0\n";
    write(root_ / std::to_string(pid) / "stat", stat);
  }
  void status(int pid, uint64_t rss_kb, int threads, uint64_t voluntary, uint64_t nonvoluntary) {
    write(root_ / std::to_string(pid) / "status",
          "Name:\tpython3\nState:\tS (sleeping)\nVmPeak:\t  999999 kB\nVmRSS:\t  " + std::to_string(rss_kb) +
              " kB\nThreads:\t" + std::to_string(threads) + "\nvoluntary_ctxt_switches:\t" +
              std::to_string(voluntary) + "\nnonvoluntary_ctxt_switches:\t" + std::to_string(nonvoluntary) + "\n");
  }
  void io(int pid, uint64_t wchar) {
    write(root_ / std::to_string(pid) / "io", "rchar: 52428800\nwchar: " + std::to_string(wchar) +
                                                 "\nsyscr: 1200\nsyscw: 340\nread_bytes: 4096\n"
                                                 "write_bytes: 8192\ncancelled_write_bytes: 0\n");
  }
  void remove(int pid) { fs::remove_all(root_ / std::to_string(pid)); }

 private:
  static void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
  fs::path root_;
};

TEST(ProcMetrics, ReadsMemoryThreadsAndContextSwitches) {
  FakeProc proc;
  FakeClock clock;
  proc.process(42, 1, 100, 50, 90'000);
  proc.status(42, 204800, 9, 1500, 37);
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  const auto s = sampler.sample(42);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->pid, 42);
  EXPECT_EQ(s->ppid, 1);
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->cpu_ticks, 150u);
  EXPECT_EQ(s->rss_bytes, 204800u * 1024);  // VmRSS over stat's pages
  EXPECT_EQ(s->threads, 9);
  EXPECT_EQ(s->voluntary_ctx_switches, 1500u);
  EXPECT_EQ(s->nonvoluntary_ctx_switches, 37u);
}

TEST(ProcMetrics, ReadsTheBytesTheProcessWroteFromItsIoFile) {
  FakeProc proc;
  FakeClock clock;
  proc.process(42, 1, 100, 50, 90'000);
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  // No io file (another user's process, an old kernel): unknown, not 0.
  ASSERT_TRUE(sampler.sample(42).has_value());
  EXPECT_FALSE(sampler.sample(42)->written_bytes.has_value());
  proc.io(42, 123'456'789'012);
  const auto s = sampler.sample(42);
  EXPECT_EQ(s->written_bytes, 123'456'789'012u);  // wchar
  EXPECT_EQ(s->dirtied_bytes, 8192u);            // write_bytes
}

TEST(ProcMetrics, WithoutStatusFallsBackToStat) {
  FakeProc proc;
  FakeClock clock;
  proc.process(7, 1, 0, 0, 0, "worker", 'R', 3, 10);
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  const auto s = sampler.sample(7);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rss_bytes, static_cast<uint64_t>(10 * kPage));
  EXPECT_EQ(s->threads, 3);
  EXPECT_FALSE(s->voluntary_ctx_switches.has_value());
}

TEST(ProcMetrics, FirstSampleIsTheAverageSinceStartThenDeltasOverTheClock) {
  FakeProc proc;
  FakeClock clock;
  proc.uptime(1000.0);
  // Started at 900 s after boot (90000 ticks); 50 s of CPU in its 100 s: 50%.
  proc.process(42, 1, 4000, 1000, 90'000);
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  auto s = sampler.sample(42);
  ASSERT_TRUE(s && s->cpu_percent);
  EXPECT_NEAR(*s->cpu_percent, 50.0, 1e-9);

  // 2 s later it has used 1.5 s more: 75%.
  clock.advance(2s);
  proc.process(42, 1, 4100, 1050, 90'000);
  s = sampler.sample(42);
  ASSERT_TRUE(s && s->cpu_percent);
  EXPECT_NEAR(*s->cpu_percent, 75.0, 1e-9);

  // Busy on two cores: 4 s of CPU in 2 s is 200%.
  clock.advance(2s);
  proc.process(42, 1, 4300, 1250, 90'000);
  s = sampler.sample(42);
  EXPECT_NEAR(*s->cpu_percent, 200.0, 1e-9);

  // Asleep: nothing more.
  clock.advance(1s);
  s = sampler.sample(42);
  EXPECT_NEAR(*s->cpu_percent, 0.0, 1e-9);
}

TEST(ProcMetrics, AWindowTooShortForWholeTicksKeepsTheLastFigure) {
  // A failure report samples the ranks again a millisecond after the
  // periodic sample: one tick in 0.75 ms read as 1337% CPU.
  FakeProc proc;
  FakeClock clock;
  proc.process(42, 1, 0, 0, 90'000);
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  sampler.sample(42);
  clock.advance(1s);
  proc.process(42, 1, 50, 0, 90'000);
  EXPECT_NEAR(*sampler.sample(42)->cpu_percent, 50.0, 1e-9);
  proc.process(42, 1, 60, 0, 90'000);
  EXPECT_NEAR(*sampler.sample(42)->cpu_percent, 50.0, 1e-9) << "same instant: the last figure stands";
  clock.advance(std::chrono::microseconds(750));
  proc.process(42, 1, 61, 0, 90'000);
  EXPECT_NEAR(*sampler.sample(42)->cpu_percent, 50.0, 1e-9) << "0.75 ms later: the last figure stands";
  clock.advance(kMinCpuWindow - std::chrono::microseconds(750));
  proc.process(42, 1, 70, 0, 90'000);
  EXPECT_NEAR(*sampler.sample(42)->cpu_percent, 100.0, 1e-9) << "measured from the last real reference point";
}

TEST(ProcMetrics, AReusedPidStartsOver) {
  FakeProc proc;
  FakeClock clock;
  proc.uptime(100.0);
  proc.process(42, 1, 5000, 0, 1'000);  // 50 s of CPU since 10 s after boot
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  sampler.sample(42);
  clock.advance(1s);
  proc.uptime(101.0);
  proc.process(42, 1, 10, 0, 9'100);  // a new process: started at 91 s, 0.1 s of CPU in 10 s
  const auto s = sampler.sample(42);
  ASSERT_TRUE(s && s->cpu_percent);
  EXPECT_NEAR(*s->cpu_percent, 1.0, 1e-9);
}

TEST(ProcMetrics, CommandNamesWithSpacesAndParentheses) {
  FakeProc proc;
  FakeClock clock;
  proc.process(5, 3, 1, 2, 0, "a (weird) name) x");
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  const auto s = sampler.sample(5);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->ppid, 3);
  EXPECT_EQ(s->cpu_ticks, 3u);
  EXPECT_EQ(sampler.parent_of(5), 3);
}

TEST(ProcMetrics, AGoneOrGarbledProcessIsNoSample) {
  FakeProc proc;
  FakeClock clock;
  ProcSampler sampler(proc.root(), clock, kHz, kPage);
  EXPECT_FALSE(sampler.sample(12345).has_value());
  EXPECT_FALSE(sampler.sample(0).has_value());
  EXPECT_EQ(sampler.parent_of(12345), 0);
  proc.process(9, 1, 0, 0, 0);
  EXPECT_TRUE(sampler.sample(9).has_value());
  proc.remove(9);
  EXPECT_FALSE(sampler.sample(9).has_value());
  fs::create_directories(fs::path(proc.root()) / "10");
  std::ofstream(fs::path(proc.root()) / "10" / "stat") << "10 (short) S 1 2\n";
  EXPECT_FALSE(sampler.sample(10).has_value());
}

TEST(ProcMetrics, SamplesThisVeryProcessFromTheRealProc) {
  ProcSampler sampler("/proc", SystemClock::instance());
  const auto s = sampler.sample(static_cast<int>(getpid()));
  ASSERT_TRUE(s.has_value());
  EXPECT_GT(s->rss_bytes.value_or(0), 0u);
  EXPECT_GE(s->threads.value_or(0), 1);
  EXPECT_TRUE(s->cpu_percent.has_value());
}

}  // namespace
}  // namespace ddp
