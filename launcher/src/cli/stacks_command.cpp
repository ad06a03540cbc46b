#include "cli/stacks_command.h"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli/job_selection.h"
#include "coordinator/coordinator_client.h"

namespace ddp {

int run_stacks_command(int argc, const char* const* argv) {
  CLI::App app{"ddplaunch stacks: every rank's stacks of a running job, grouped by identical stack", "ddplaunch stacks"};
  std::string job_id;
  bool json = false;
  double wait_s = 10;
  app.add_option("--job", job_id, "the job id (--rdzv-id); needed when several jobs run");
  app.add_flag("--json", json, "one JSON document instead of the grouped text");
  app.add_option("--wait", wait_s, "seconds to wait for the ranks' answers")->check(CLI::Range(0.1, 60.0))->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddplaunch stacks: error: %s\n", e.what());
    return 2;
  }
  const SelectedJob selected = select_running_job("stacks", job_id);
  if (!selected.job) return selected.exit_code;
  const RunningJob& job = *selected.job;
  CoordinatorClient client(job.endpoint, job.job_id, job.token, TlsFiles{job.tls_cert, job.tls_key, job.tls_ca});
  std::string text;
  const Status s =
      client.stacks(std::chrono::duration_cast<Duration>(std::chrono::duration<double>(wait_s)), text);
  if (!s.ok()) {
    std::fprintf(stderr, "ddplaunch stacks: error: the coordinator of job %s at %s: %s\n", job.job_id.c_str(),
                 job.endpoint.c_str(), s.message().c_str());
    return 1;
  }
  nlohmann::json merged = nlohmann::json::parse(text, nullptr, false);
  if (json) {
    std::printf("%s\n", merged.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("job %s: stacks of %d rank(s), grouped by identical stack (innermost frame last)\n%s",
                job.job_id.c_str(), merged.value("asked", 0), merged.value("text", std::string()).c_str());
  }
  return 0;
}

}  // namespace ddp
