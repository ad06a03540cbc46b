#pragma once
// The kernel's CPU list syntax ("0-3,8,10-11", as in sysfs cpulist files and
// taskset -c). Pure.

#include <optional>
#include <set>
#include <string>

namespace ddp {

/// nullopt when text is not a CPU list (empty text is the empty list).
std::optional<std::set<int>> parse_cpu_list(const std::string& text);
/// The shortest form: {0,1,2,4} -> "0-2,4".
std::string format_cpu_list(const std::set<int>& cpus);

}  // namespace ddp
