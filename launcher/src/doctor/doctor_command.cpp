#include "doctor/doctor_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "doctor/preflight.h"

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
  app.add_flag("--json", json, "one JSON document instead of the lines");
  try {
    app.parse(argc, argv);
    if (!valid_nproc_spec(in.nproc_per_node)) {
      throw CLI::ValidationError(fmt::format(
          "--nproc-per-node must be a positive integer or gpu, cpu or auto; got '{}'", in.nproc_per_node));
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

  const auto results = run_preflight(in);
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
