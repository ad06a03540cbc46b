#include "cli/top_command.h"

#include <CLI/CLI.hpp>
#include <poll.h>
#include <sys/ioctl.h>
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

// Waits until `until`; true when an interrupt signal came first.
bool interrupted_before(int signals, SteadyClock::time_point until) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - SteadyClock::now());
    if (left.count() <= 0) return false;
    if (signals < 0) {
      usleep(static_cast<useconds_t>(std::min<int64_t>(left.count(), 1000) * 1000));
      continue;
    }
    pollfd fd{signals, POLLIN, 0};
    if (poll(&fd, 1, static_cast<int>(left.count())) > 0 && (fd.revents & POLLIN)) return true;
  }
}

}  // namespace

int run_top_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch top: a running job's ranks, refreshed in place (Ctrl-C quits; the job keeps running)",
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
  std::optional<TerminalDrawing> drawing;
  if (screen_of_stdout().terminal) drawing.emplace();
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
        if (signals >= 0) close(signals);
        return report_unreachable_coordinator("top", job, asked);
      }
    }
    if (interrupted_before(signals, round + interval)) break;
  }
  drawing.reset();
  if (signals >= 0) close(signals);
  return 0;
}

}  // namespace ddp
