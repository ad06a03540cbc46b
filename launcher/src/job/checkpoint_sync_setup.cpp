#include "job/checkpoint_sync_setup.h"

#include <spdlog/spdlog.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <fstream>

#include "job/log_layout.h"
#include "process/stop_signals.h"
#include "sync/aws_credentials.h"
#include "sync/s3_store.h"

namespace ddp {
namespace fs = std::filesystem;

std::unique_ptr<CheckpointSync> start_checkpoint_sync(const LaunchPlan& plan, bool uploads) {
  if (plan.sync.targets.empty()) return nullptr;
  std::string why;
  const std::optional<AwsCredentials> credentials = resolve_aws_credentials(
      process_aws_env(),
      why);
  if (!credentials) {
    spdlog::warn("--sync: {}: nothing is synced; the job runs", why);
    return nullptr;
  }
  spdlog::info("--sync: credentials {}{}", credentials->describe(),
               credentials->endpoint_url.empty() ? "" : fmt::format(", endpoint {}", credentials->endpoint_url));
  auto sync = std::make_unique<CheckpointSync>(
      plan.sync,
      [&](const SyncTarget& target) -> std::unique_ptr<ObjectStore> {
        return std::make_unique<S3ObjectStore>(*credentials, target.bucket);
      },
      uploads ? (plan.job_log_dir / kSyncStateFile).string() : std::string());
  sync->download_missing();
  if (uploads) sync->start_uploads();
  return sync;
}

std::string finish_checkpoint_sync(CheckpointSync& sync, const LaunchPlan& plan, int last_attempt) {
  // The stop signals are blocked (the event loop read them): a signal now,
  // a second Ctrl-C say, ends the wait.
  sigset_t stop_set;
  sigemptyset(&stop_set);
  for (int signo : stop_signals()) sigaddset(&stop_set, signo);
  const int interrupt_fd = signalfd(-1, &stop_set, SFD_CLOEXEC | SFD_NONBLOCK);
  const nlohmann::json now = sync.state_json();
  int pending = 0;
  if (!now.is_null()) {
    for (const auto& t : now["targets"]) pending += t.value("pending", 0);
  }
  if (pending > 0) {
    spdlog::info("--sync: waiting up to {:.0f} s (--sync-wait) for {} pending upload(s); a signal ends the wait",
                 std::chrono::duration<double>(plan.sync.final_wait).count(), pending);
  }
  const nlohmann::json report = sync.finish(plan.sync.final_wait, interrupt_fd);
  if (interrupt_fd >= 0) close(interrupt_fd);
  if (report.is_null()) return "";
  const std::string summary = sync.summary();
  bool complete = true;
  for (const auto& t : report["targets"]) complete = complete && t["pending"].get<int>() == 0;
  if (complete) {
    spdlog::info("{}", summary);
  } else {
    spdlog::warn("{} (--sync-wait {:.0f} s ran out, or a signal ended the wait)", summary,
                 std::chrono::duration<double>(plan.sync.final_wait).count());
  }
  const fs::path failure = attempt_log_dir(plan.job_log_dir, last_attempt) / "failure.json";
  std::error_code ec;
  if (fs::exists(failure, ec)) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(failure), nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) {
      j["sync"] = report;
      std::ofstream(failure, std::ios::trunc) << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
                                              << '\n';
    }
  }
  return summary + "\n";
}

}  // namespace ddp
