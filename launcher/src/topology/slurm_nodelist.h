#pragma once
// Slurm's compact host lists (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST),
// expanded without scontrol, which compute nodes may lack. Pure.

#include <string>
#include <vector>

namespace ddp {

/// Expands a Slurm node list without scontrol, which may not be installed on
/// the compute node: "node[01-03,07],gpu5,rack[1-2]-n[1-2]" -> node01 node02
/// node03 node07 gpu5 rack1-n1 rack1-n2 rack2-n1 rack2-n2. Zero padding follows
/// the width of a range's lower bound; several bracket groups in one name
/// multiply out, the leftmost varying slowest; commas inside brackets separate
/// ranges, outside them hosts. Throws UsageError quoting the offending text on
/// malformed input ("node[1-", "a[3-1]", "a,,b", "[]") or an absurd size
/// (more than 2^20 hosts, or a host name longer than 255 characters).
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist);

}  // namespace ddp
