#include <fmt/format.h>

#include <algorithm>

#include "nccl/nccl_diagnosis.h"

namespace ddp::nccl {
namespace {

/// "0-3 5 9-11": compact rank lists (sorted input).
std::string rank_ranges(const std::vector<int>& ranks, size_t max_items = 32) {
  std::string out;
  size_t items = 0;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (items++ == max_items) {
      out += fmt::format(" ... ({} ranks in all)", ranks.size());
      break;
    }
    if (!out.empty()) out += ' ';
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const char* sep, size_t max_items = 8) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i == max_items) {
      out += fmt::format("{}... ({} in all)", sep, v.size());
      break;
    }
    if (i) out += sep;
    out += v[i];
  }
  return out;
}

std::string or_unknown(const std::string& s) { return s.empty() ? "?" : s; }

}  // namespace

std::string render_text(const NcclDiagnosis& d, size_t max_ranks) {
  std::string o;
  o += fmt::format("NCCL diagnosis: {} file(s), {} lines ({} from NCCL), {} process(es)\n", d.files.size(),
                   d.stats.lines, d.stats.nccl_lines, d.processes.size());

  if (d.versions.empty()) {
    o += "NCCL version: not logged\n";
  } else {
    std::vector<std::string> vs;
    for (const auto& v : d.versions) vs.push_back(fmt::format("{} ({} process(es))", v.version, v.processes));
    o += fmt::format("NCCL version: {}{}\n", join(vs, ", "), d.versions.size() > 1 ? "  <- MISMATCH" : "");
  }

  o += "\nNetwork:\n";
  o += fmt::format("  in use: {}\n", d.network.in_use.empty() ? std::string("not logged") : join(d.network.in_use, ", "));
  for (const auto& dev : d.network.devices) o += fmt::format("  {}\n", dev);
  std::vector<std::string> ifs;
  for (const auto& i : d.network.interfaces) ifs.push_back(fmt::format("{} {} ({})", i.host, i.interface, i.address));
  if (!ifs.empty()) o += fmt::format("  bootstrap: {}\n", join(ifs, ", "));
  for (const auto& [name, values] : d.network.env) o += fmt::format("  {}={}\n", name, join(values, ","));
  if (d.network.nvls_available + d.network.nvls_unavailable > 0)
    o += fmt::format("  NVLS multicast: available on {} device(s), not on {}\n", d.network.nvls_available,
                     d.network.nvls_unavailable);

  o += "\nCommunicators:\n";
  if (d.communicators.empty()) o += "  none initialized in these logs\n";
  for (const auto& c : d.communicators) {
    o += fmt::format("  {}: {} ranks, {} complete", c.comm_id.empty() ? std::string("(no commId)") : c.comm_id,
                     c.nranks < 0 ? std::string("?") : std::to_string(c.nranks), c.ranks_complete.size());
    if (c.ranks_missing.empty()) {
      o += " - init complete on every rank";
    } else {
      o += fmt::format(", NOT complete: {}", rank_ranges(c.ranks_missing));
    }
    o += fmt::format(" [hosts: {}]\n", join(c.hosts, ", "));
    if (!c.ranks_missing.empty()) {
      if (!c.ranks_not_seen.empty())
        o += fmt::format("    never logged: {} (did they start? wrong NCCL_DEBUG_FILE?)\n", rank_ranges(c.ranks_not_seen));
      if (!c.ranks_started_not_complete.empty())
        o += fmt::format("    started but not complete: {}\n", rank_ranges(c.ranks_started_not_complete));
      o += fmt::format("    likely culprits of a hang at init: ranks {}{}\n",
                       rank_ranges(c.ranks_not_seen.empty() ? c.ranks_missing : c.ranks_not_seen),
                       c.ranks_not_seen.empty() ? "" : " (the others wait for them)");
    }
  }

  bool any_not_seen = std::any_of(d.communicators.begin(), d.communicators.end(),
                                  [](const NcclCommunicatorInfo& c) { return !c.ranks_not_seen.empty(); });
  if (any_not_seen) {
    std::vector<std::string> idle;
    for (const auto& p : d.processes)
      if (p.ranks == 0) idle.push_back(fmt::format("{}:{} ({})", p.host, p.pid, p.source));
    if (!idle.empty())
      o += fmt::format("  processes with NCCL lines that never started a communicator: {}\n", join(idle, ", ", 8));
  }

  if (!d.ranks.empty()) {
    o += "\nRanks:\n";
    size_t shown = 0;
    for (const auto& r : d.ranks) {
      if (max_ranks && shown == max_ranks) {
        o += fmt::format("  ... {} more (--json lists all)\n", d.ranks.size() - shown);
        break;
      }
      ++shown;
      std::string timing = r.init_seconds >= 0 ? fmt::format(" ({:.2f} s)", r.init_seconds) : std::string();
      o += fmt::format("  rank {:>4}/{:<4} {} pid {} cudaDev {} busId {} {}{}{}\n", r.rank,
                       r.nranks < 0 ? std::string("?") : std::to_string(r.nranks), or_unknown(r.host), r.pid,
                       r.cuda_dev, or_unknown(r.bus_id),
                       r.init_complete ? "init complete" : r.init_started ? "init STARTED, not complete" : "init ?",
                       timing, r.comm_id.empty() || d.communicators.size() < 2 ? "" : " comm " + r.comm_id);
    }
  }

  if (!d.host_links.empty()) {
    o += "\nTransports (host -> host):\n";
    for (const auto& h : d.host_links) {
      o += fmt::format("  {} -> {}  {:<18} {} rank pair(s), {} channel(s){}\n", or_unknown(h.src_host),
                       or_unknown(h.dst_host), h.transport, h.rank_pairs, h.channels, h.gdr ? ", GPUDirect RDMA" : "");
    }
  }

  o += "\nWarnings:\n";
  if (d.warnings.empty()) o += "  none\n";
  for (const auto& w : d.warnings) {
    o += fmt::format("  [{}] x{}: {}{}\n", w.cls, w.count, w.example,
                     w.location.empty() ? std::string() : " (" + w.location + ")");
    if (!w.processes.empty()) o += fmt::format("    on: {}\n", join(w.processes, ", "));
    if (!w.peers.empty()) {
      o += fmt::format("    peers: {}", join(w.peers, ", "));
      if (!w.peer_hosts.empty()) o += fmt::format(" (hosts: {})", join(w.peer_hosts, ", "));
      o += '\n';
    }
    if (!w.hint.empty()) o += fmt::format("    hint: {}\n", w.hint);
  }
  return o;
}

}  // namespace ddp::nccl
