#include "cli/top_command.h"

#include <CLI/CLI.hpp>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "cli/job_end.h"
#include "cli/job_selection.h"
#include "cli/number_checks.h"
#include "cli/top_frame.h"
#include "process/interrupt_signals.h"

namespace ddp {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Each ask of the coordinator, as `status` asks it.
constexpr auto kAskTimeout = std::chrono::seconds(5);
// A coordinator that does not answer while the job's agent still runs (not
// listening yet after `ddplaunch -d`, a restart's teardown, a failover to the
// next endpoint, a loaded machine) is waited for this long.
constexpr auto kUnansweredLimit = std::chrono::seconds(10);

// stdout as `top` draws on it: a terminal's size, read again for every frame
// so that a resized window gets frames of its new size.
TopScreen screen_of_stdout() {
  TopScreen screen;
  screen.terminal = isatty(STDOUT_FILENO) == 1;
  winsize size{};
  if (screen.terminal && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_row > 0 && size.ws_col > 0) {
    screen.rows = size.ws_row;
    screen.columns = size.ws_col;
  }
  return screen;
}

// On a terminal: the cursor hidden and the screen cleared while `top` draws;
// the cursor shown again however it ends.
class TerminalDrawing {
 public:
  TerminalDrawing() {
    std::fputs(kHideCursor, stdout);
    std::fputs(kClearScreen, stdout);
  }
  ~TerminalDrawing() {
    std::fputs(kShowCursor, stdout);
    std::fflush(stdout);
  }
  TerminalDrawing(const TerminalDrawing&) = delete;
  TerminalDrawing& operator=(const TerminalDrawing&) = delete;
};

// On a terminal: stdin read key by key and not echoed, so that `q` quits as
// in top and htop; the terminal's settings restored however `top` ends.
// Ctrl-C still raises SIGINT (ISIG stays on). Left alone where stdin is no
// terminal, or belongs to a background job (changing it would stop `top`
// with SIGTTOU).
class QuitKey {
 public:
  /// Reads no key unless `wanted` (stdout is a terminal: `top` draws there).
  explicit QuitKey(bool wanted) {
    if (!wanted || isatty(STDIN_FILENO) != 1 || tcgetattr(STDIN_FILENO, &saved_) != 0) return;
    const pid_t foreground = tcgetpgrp(STDIN_FILENO);
    if (foreground != -1 && foreground != getpgrp()) return;
    termios keys = saved_;
    keys.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO));
    keys.c_cc[VMIN] = 0;
    keys.c_cc[VTIME] = 0;
    if (tcsetattr(STDIN_FILENO, TCSANOW, &keys) == 0) fd_ = STDIN_FILENO;
  }
  ~QuitKey() {
    if (fd_ >= 0) tcsetattr(STDIN_FILENO, TCSANOW, &saved_);
  }
  QuitKey(const QuitKey&) = delete;
  QuitKey& operator=(const QuitKey&) = delete;

  /// stdin while keys are read, else -1.
  int fd() const { return fd_; }
  /// Reads the keys typed; true when one was q or Q. A terminal that hung
  /// up is read no more.
  bool pressed(short revents) {
    if (revents & (POLLHUP | POLLERR | POLLNVAL)) fd_ = -1;
    char keys[64];
    for (ssize_t n; fd_ >= 0 && (n = read(fd_, keys, sizeof keys)) > 0;) {
      if (std::find(keys, keys + n, 'q') != keys + n || std::find(keys, keys + n, 'Q') != keys + n) return true;
    }
    return false;
  }

 private:
  termios saved_{};
  int fd_ = -1;
};

// Waits until `until`; true when an interrupt signal or the quit key came first.
bool interrupted_before(int signals, QuitKey& quit, SteadyClock::time_point until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - SteadyClock::now());
    if (left.count() <= 0) return false;
    pollfd fds[2] = {{signals, POLLIN, 0}, {quit.fd(), POLLIN, 0}};  // poll skips a negative fd
    if (signals < 0 && quit.fd() < 0) {
      usleep(static_cast<useconds_t>(std::min<int64_t>(left.count(), 1000) * 1000));
      continue;
    }
    if (poll(fds, 2, static_cast<int>(left.count())) <= 0) continue;
    if (fds[0].revents & POLLIN) return true;
    if (fds[1].revents != 0 && quit.pressed(fds[1].revents)) return true;
  }
}

}  // namespace

int run_top_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch top: a running job's ranks, refreshed in place (q or Ctrl-C quits; the job keeps running)",
               "ddplaunch top"};
  std::string job_id;
  double interval_s = 1.0;
  int iterations = 0;  // 0: until Ctrl-C or the job's end
  bool once = false;
  add_job_argument(app, job_id);
  app.add_option("--interval", interval_s, "seconds between refreshes, 0.1 to 3600")
      ->check(positive_number())
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  CLI::Option* count = app.add_option("-n,--iterations", iterations, "stop after this many refreshes")
                           ->check(positive_number());
  app.add_flag("--once", once, "one refresh, then exit (-n 1)")->excludes(count);
  if (const auto done = parse_command_line(app, "top", argc, argv)) return *done;
  if (once) iterations = 1;

  const SelectedJob selected = select_running_job("top", job_id);
  if (!selected.job) return selected.exit_code;
  JobRecord job = *selected.job;
  std::unique_ptr<CoordinatorClient> client = coordinator_of(job);
  const int signals = interrupt_signal_fd();
  const bool terminal = screen_of_stdout().terminal;
  std::optional<TerminalDrawing> drawing;
  if (terminal) drawing.emplace();
  std::optional<QuitKey> quit_key(std::in_place, terminal);
  const auto interval = std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(interval_s));

  int frames = 0;
  SteadyClock::time_point last_answer = SteadyClock::now();
  for (;;) {
    const SteadyClock::time_point round = SteadyClock::now();
    std::string reply;
    Status asked = client->status(kAskTimeout, reply);
    const nlohmann::json status = asked.ok() ? nlohmann::json::parse(reply, nullptr, false) : nlohmann::json();
    if (asked.ok() && !status.is_object()) asked = Status(StatusCode::kInternal, "its status is not a JSON object");
    if (asked.ok()) {
      const TopScreen screen = screen_of_stdout();
      if (!screen.terminal && frames > 0) std::fputs("\n", stdout);
      std::fputs(render_top_frame(status, screen).c_str(), stdout);
      // SIGPIPE is ignored (main.cpp): a reader that went (`top | head`) shows here.
      if (std::fflush(stdout) != 0) break;
      last_answer = SteadyClock::now();
      if (++frames == iterations) break;
    }
    if (const std::optional<JobRecord> end = end_of(job)) {
      drawing.reset();
      quit_key.reset();
      report_job_end(*end, false);  // its exit code is the job's, not top's
      break;
    }
    if (!asked.ok()) {
      // The agent's record names the coordinator it follows now (a failover).
      const std::optional<JobRecord> now = find_job(job.job_id, job.pid);
      if (now && now->endpoint != job.endpoint) {
        job = *now;
        client = coordinator_of(job);
        continue;
      }
      if (SteadyClock::now() - last_answer > kUnansweredLimit) {
        drawing.reset();
        quit_key.reset();
        if (signals >= 0) close(signals);
        return report_unreachable_coordinator("top", job, asked);
      }
    }
    if (interrupted_before(signals, *quit_key, round + interval)) break;
  }
  drawing.reset();
  quit_key.reset();
  if (signals >= 0) close(signals);
  return 0;
}

}  // namespace ddp
