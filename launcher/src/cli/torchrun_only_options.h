#pragma once
// torchrun options that configure torchrun's own machinery: each is either
// meaningless under ddplaunch (said once, at debug level, with why) or needs
// something ddplaunch does not have (a clear usage error naming it). The
// README's table of torchrun options says the same.

#include <string>
#include <vector>

#include "cli/launch_options.h"

namespace ddp {

/// Throws UsageError for --logs-specs (a Python plugin), --rdzv-backend=etcd
/// or etcd-v2 (an etcd server; ddplaunch's coordinator is the rendezvous) and
/// --numa-binding without a visible GPU. Returns one note per accepted option
/// that has no effect here.
std::vector<std::string> check_torchrun_only_options(const LaunchOptions& options, int visible_gpus);

/// torchrun's --duplicate-*-filters list: comma separated, ",," for a comma
/// inside a filter; empty items are dropped.
std::vector<std::string> parse_duplicate_filters(const std::string& text);

}  // namespace ddp
