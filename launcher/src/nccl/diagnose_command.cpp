#include "nccl/diagnose_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "cli/number_checks.h"
#include "exit_codes.h"
#include "nccl/nccl_log_files.h"

namespace ddp {
namespace {

int input_error(const std::string& what) {
  std::fprintf(stderr, "ddplaunch diagnose: error: %s\n", what.c_str());
  return exit_code::kUsage;
}

}  // namespace

int run_diagnose_command(int argc, const char* const* argv) {
  std::vector<std::string> paths;
  bool json = false;
  size_t max_ranks = 64;
  CLI::App app{"ddplaunch diagnose: summarize the NCCL logs of a job (NCCL_DEBUG=INFO output)", "ddplaunch diagnose"};
  app.add_option("paths", paths, "a job's log directory (searched for nccl.log and *.log) or NCCL log files")
      ->required();
  app.add_flag("--json", json, "print one JSON document (keys: see launcher/src/nccl/nccl_diagnosis.h)");
  // A size_t would take "-1" as the largest value: the check refuses it first.
  app.add_option("--max-ranks", max_ranks, "rank lines in the text summary (0: all)")
      ->check(non_negative_number())
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return exit_code::kSuccess;
  } catch (const CLI::ParseError& e) {
    std::string msg = e.what();
    if (msg.empty()) msg = "bad command line";
    return input_error(msg);
  }

  nccl::NcclDiagnosis d;
  try {
    nccl::NcclLogParser parser;
    auto files = nccl::find_nccl_logs(paths);
    if (files.empty()) return input_error("no log files (nccl.log, *.log) under " + paths.front());
    for (const auto& f : files) nccl::feed_file(parser, f);
    d = parser.summarize();
  } catch (const nccl::DiagnoseInputError& e) {
    return input_error(e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddplaunch diagnose: internal error: %s\n", e.what());
    return exit_code::kInternal;
  }
  if (d.empty()) {
    return input_error("no NCCL lines found in " + std::to_string(d.files.size()) +
                       " file(s); was the job run with NCCL_DEBUG=INFO?");
  }
  std::string out = json ? nccl::to_json(d).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n" : nccl::render_text(d, max_ranks);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return exit_code::kSuccess;
}

}  // namespace ddp
