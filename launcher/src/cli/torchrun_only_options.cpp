#include "cli/torchrun_only_options.h"

#include <fmt/format.h>

#include "cli/usage_error.h"

namespace ddp {

std::vector<std::string> check_torchrun_only_options(const LaunchOptions& o, int visible_gpus) {
  if (!o.logs_specs.empty()) {
    throw UsageError(fmt::format("--logs-specs={} names a torchrun.logs_specs Python plugin, which ddplaunch cannot "
                                 "load; it writes the logs itself (--log-dir, --tee, --redirects, "
                                 "--local-ranks-filter, --duplicate-stdout-filters)",
                                 o.logs_specs));
  }
  if (o.rdzv_backend == "etcd" || o.rdzv_backend == "etcd-v2") {
    throw UsageError(fmt::format("--rdzv-backend={} needs an etcd server; ddplaunch's own coordinator is the "
                                 "rendezvous: drop the option and point --rdzv-endpoint at node 0 (HOST:PORT)",
                                 o.rdzv_backend));
  }
  if (!o.numa_binding.empty() && visible_gpus == 0) {
    throw UsageError(fmt::format("--numa-binding={} binds each rank to the CPUs near its GPU, and no CUDA device is "
                                 "visible here",
                                 o.numa_binding));
  }
  std::vector<std::string> notes;
  if (o.monitor_interval_s != 0.1) {
    notes.push_back(fmt::format("--monitor-interval={} has no effect: ddplaunch learns of a worker's exit the moment "
                                "it happens (SIGCHLD), without polling",
                                o.monitor_interval_s));
  }
  if (o.start_method != "spawn") {
    notes.push_back(fmt::format("--start-method={} has no effect: every worker is a new process running the program "
                                "(fork + exec), which is what torchrun's spawn gives a script",
                                o.start_method));
  }
  if (o.event_log_handler != "null") {
    notes.push_back(fmt::format("--event-log-handler={}: ddplaunch logs the job's events on its own console and in "
                                "failure.json",
                                o.event_log_handler));
  }
  if (o.rdzv_backend == "c10d") notes.push_back("--rdzv-backend=c10d: the rendezvous is ddplaunch's coordinator");
  return notes;
}

std::vector<std::string> parse_duplicate_filters(const std::string& text) {
  std::vector<std::string> filters;
  std::string current;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != ',') {
      current += text[i];
    } else if (i + 1 < text.size() && text[i + 1] == ',') {
      current += ',';
      ++i;
    } else {
      if (!current.empty()) filters.push_back(current);
      current.clear();
    }
  }
  if (!current.empty()) filters.push_back(current);
  return filters;
}

}  // namespace ddp
