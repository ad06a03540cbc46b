#include "report/root_cause_summary.h"

#include <fmt/format.h>

#include <ctime>

#include "process/exit_status.h"  // signal_name
#include "report/failure_report.h"  // traceback_of

namespace ddp {
namespace {

const std::string kRule(60, '=');
const std::string kThinRule(60, '-');

// torchrun's timestamp: local time, "2024-05-01_12:34:56".
std::string timestamp(WallTime t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm local{};
  localtime_r(&seconds, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d_%H:%M:%S", &local);
  return text;
}

std::string traceback(const RankFailure& f) {
  if (f.error_file_contents) {
    if (auto tb = traceback_of(*f.error_file_contents)) {
      // The rank raised, so the fatal signal ended one of its children (a
      // DataLoader worker): its stack says where, the exception only that it died.
      if (f.fatal_stack.empty()) return *tb;
      return fmt::format("{}\nPython stack at a child process's fatal signal ({}):\n{}", *tb, kFatalStackFileName,
                         f.fatal_stack);
    }
  }
  if (f.signal != 0) {
    std::string text = fmt::format("Signal {} ({}) received by PID {}", f.signal, signal_name(f.signal), f.pid);
    if (!f.fatal_stack.empty()) text += "\n" + f.fatal_stack;
    return text;
  }
  return "not recorded (decorate the script's main with torch.distributed.elastic.multiprocessing.errors.record)";
}

// Multi-line values are indented under their field, as torchrun does.
std::string indent_continuation_lines(std::string text) {
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1)) text.insert(at + 1, "  ");
  return text;
}

std::string format_one(int index, const RankFailure& f) {
  std::string tb = traceback(f);
  while (!tb.empty() && (tb.back() == '\n' || tb.back() == ' ')) tb.pop_back();
  tb = indent_continuation_lines(std::move(tb));
  return fmt::format(
      "[{}]:\n"
      "  time      : {}\n"
      "  host      : {}\n"
      "  rank      : {} (local_rank: {})\n"
      "  exitcode  : {} (pid: {})\n"
      "  error_file: {}\n"
      "  traceback : {}\n",
      index, timestamp(f.time), f.host, f.rank, f.local_rank, f.signal != 0 ? -f.signal : f.exit_code, f.pid,
      f.error_file.empty() ? "<N/A>" : f.error_file, tb);
}

std::string numbered(const std::vector<RankFailure>& failures, int first_index) {
  std::string out;
  for (size_t i = 0; i < failures.size(); ++i) out += format_one(static_cast<int>(i) + first_index, failures[i]);
  return out.empty() ? "  <NO_OTHER_FAILURES>\n" : out;
}

}  // namespace

std::string format_root_cause_summary(const std::string& program, const RankFailure& root,
                                      const std::vector<RankFailure>& others) {
  const std::string failures = numbered(others, 1);
  return fmt::format("{}\n{} FAILED\n{}\nFailures:\n{}{}\nRoot Cause (first observed failure):\n{}{}\n", kRule,
                     program, kThinRule, failures, kThinRule, format_one(0, root), kRule);
}

std::string format_remote_root_cause_summary(const std::string& program, const std::string& where,
                                             const std::string& root_cause,
                                             const std::vector<RankFailure>& local_failures) {
  const std::string cause = indent_continuation_lines(root_cause);
  return fmt::format("{}\n{} FAILED\n{}\nFailures on this node (after the root cause):\n{}{}\nRoot Cause (the job's "
                     "first failure, on {}):\n  {}\n{}\n",
                     kRule, program, kThinRule, numbered(local_failures, 1), kThinRule, where, cause, kRule);
}

}  // namespace ddp
