#include "cli/stacks_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/job_selection.h"

namespace ddp {

int run_stacks_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch stacks: every rank's stacks of a running job, grouped by identical stack", "ddplaunch stacks"};
  JobCommandLine line;
  double wait_s = 10;
  app.add_option("--wait", wait_s, "seconds to wait for the ranks' answers")->check(CLI::Range(0.1, 60.0))->capture_default_str();
  if (const auto done = parse_job_command_line(app, "stacks", "the grouped text", line, argc, argv)) return *done;
  JobRecord job;
  std::string text;
  const Duration wait = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(wait_s));
  if (const int failed = ask_running_job(
          "stacks", line.job_id, [&](CoordinatorClient& client, std::string& reply) { return client.stacks(wait, reply); },
          &job, &text)) {
    return failed;
  }
  nlohmann::json merged = nlohmann::json::parse(text, nullptr, false);
  if (line.json) {
    std::printf("%s\n", merged.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("job %s: stacks of %d rank(s), grouped by identical stack (innermost frame last)\n%s",
                job.job_id.c_str(), merged.value("asked", 0), merged.value("text", std::string()).c_str());
  }
  return 0;
}

}  // namespace ddp
