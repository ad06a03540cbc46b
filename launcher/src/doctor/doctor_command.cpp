#include "doctor/doctor_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "doctor/preflight.h"
#include "doctor/sync_checks.h"

namespace ddp {
namespace {

int count(const std::vector<CheckResult>& results, CheckLevel level) {
  return static_cast<int>(
      std::count_if(results.begin(), results.end(), [&](const CheckResult& r) { return r.level == level; }));
}

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

}  // namespace

std::string render_checks_text(const std::vector<CheckResult>& results, double elapsed_s) {
  std::string out;
  for (const auto& r : results) out += fmt::format("{:<4}  {}: {}\n", level_name(r.level), r.name, r.reason);
  out += fmt::format("summary: {} ok, {} warn, {} fail ({} checks in {:.2f} s)\n", count(results, CheckLevel::kOk),
                     count(results, CheckLevel::kWarn), count(results, CheckLevel::kFail), results.size(), elapsed_s);
  return out;
}

nlohmann::json render_checks_json(const std::vector<CheckResult>& results, double elapsed_s) {
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& r : results) checks.push_back({{"name", r.name}, {"level", level_name(r.level)}, {"reason", r.reason}});
  return {{"checks", checks},
          {"summary",
           {{"ok", count(results, CheckLevel::kOk)},
            {"warn", count(results, CheckLevel::kWarn)},
            {"fail", count(results, CheckLevel::kFail)}}},
          {"result", level_name(worst_level(results))},
          {"elapsed_s", elapsed_s}};
}

int run_doctor_command(int argc, const char* const* argv) {
  const auto start = std::chrono::steady_clock::now();
  CLI::App app{"ddplaunch doctor: checks this machine before a job (GPUs, driver, CUDA, NCCL, network, disk, BLAS)",
               "ddplaunch doctor"};
  PreflightInputs in;
  bool json = false;
  app.add_option("--nproc-per-node,--nproc_per_node", in.nproc_per_node, "N | gpu | cpu | auto, as for a job")
      ->capture_default_str();
  app.add_option("--master-addr,--master_addr", in.master_addr, "the host --master-port is checked on")
      ->capture_default_str();
  app.add_option("--master-port,--master_port", in.master_port, "check that this port is free (or reachable)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", in.rdzv_endpoint,
                 "HOST[:PORT]: free here, or reachable within 300 ms when HOST is another machine");
  app.add_option("--log-dir,--log_dir", in.log_dir, "default ${TMPDIR:-/tmp}/ddplaunch-logs, as ddplaunch");
  app.add_option("--checkpoint-dir,--checkpoint_dir", in.checkpoint_dir, "also check free space here");
  std::vector<std::string> sync_specs;
  app.add_option("--sync", sync_specs,
                 "DIR=s3://BUCKET/PREFIX, repeatable: check the credentials and that this key may list, write and "
                 "delete there (an empty probe object, deleted at once)")
      ->type_name("DIR=s3://BUCKET/PREFIX")
      ->allow_extra_args(false);  // repeatable, one value each: what follows is PROGRAM
  app.add_flag("--json", json, "one JSON document instead of the lines");
  std::vector<SyncTarget> sync_targets;
  try {
    app.parse(argc, argv);
    if (!valid_nproc_spec(in.nproc_per_node)) {
      throw CLI::ValidationError(fmt::format(
          "--nproc-per-node must be a positive integer or gpu, cpu or auto; got '{}'", in.nproc_per_node));
    }
    for (const std::string& spec : sync_specs) {
      std::string why;
      std::optional<SyncTarget> target = parse_sync_target(spec, why);
      if (!target) throw CLI::ValidationError(fmt::format("--sync {}: {}", spec, why));
      sync_targets.push_back(std::move(*target));
    }
    if (!in.rdzv_endpoint.empty()) {
      if (const std::string why = rdzv_endpoint_error(in.rdzv_endpoint); !why.empty()) {
        throw CLI::ValidationError(fmt::format("--rdzv-endpoint '{}': {}", in.rdzv_endpoint, why));
      }
    }
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddplaunch doctor: error: %s\n", one_line(e.what()).c_str());
    return 2;
  }

  std::vector<CheckResult> results = run_preflight(in);
  for (CheckResult& r : sync_checks(sync_targets)) results.push_back(std::move(r));
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (json) {
    std::printf("%s\n", render_checks_json(results, elapsed).dump(2).c_str());
  } else {
    std::printf("%s", render_checks_text(results, elapsed).c_str());
  }
  std::fflush(stdout);
  return worst_level(results) == CheckLevel::kFail ? 1 : 0;
}

}  // namespace ddp
