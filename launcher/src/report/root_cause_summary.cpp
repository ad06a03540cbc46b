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
    if (auto tb = traceback_of(*f.error_file_contents)) return *tb;
  }
  if (f.signal != 0) return fmt::format("Signal {} ({}) received by PID {}", f.signal, signal_name(f.signal), f.pid);
  return "not recorded (decorate the script's main with torch.distributed.elastic.multiprocessing.errors.record)";
}

std::string format_one(int index, const RankFailure& f) {
  // Multi-line tracebacks are indented under their field, as torchrun does.
  std::string tb = traceback(f);
  while (!tb.empty() && (tb.back() == '\n' || tb.back() == ' ')) tb.pop_back();
  for (size_t at = tb.find('\n'); at != std::string::npos; at = tb.find('\n', at + 1)) tb.insert(at + 1, "  ");
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

}  // namespace

std::string format_root_cause_summary(const std::string& program, const RankFailure& root,
                                      const std::vector<RankFailure>& others) {
  std::string failures;
  for (size_t i = 0; i < others.size(); ++i) failures += format_one(static_cast<int>(i) + 1, others[i]);
  if (failures.empty()) failures = "  <NO_OTHER_FAILURES>\n";
  return fmt::format("{}\n{} FAILED\n{}\nFailures:\n{}{}\nRoot Cause (first observed failure):\n{}{}\n", kRule,
                     program, kThinRule, failures, kThinRule, format_one(0, root), kRule);
}

}  // namespace ddp
