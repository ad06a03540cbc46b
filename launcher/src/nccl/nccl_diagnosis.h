#pragma once
// NcclDiagnosis: what the NCCL logs of a job say, summarized (built by
// NcclLogParser::summarize, see nccl_log_parser.h), and its two renderings.
// Plain values, no references into the logs; copy freely.
//
// JSON document (to_json), keys:
//   files[]                      log files read
//   stats{bytes, lines, nccl_lines, unknown_nccl_lines, non_nccl_lines, error_traces}
//   versions[]{version, processes}   distinct NCCL versions ("2.18.3", without +cuda)
//   communicators[]{comm_id (null when the NCCL version does not print it), nranks,
//                   ranks_complete[], ranks_missing[] (not Init COMPLETE: the likely
//                   culprits of a hang at init), ranks_started_not_complete[],
//                   ranks_not_seen[], hosts[]}
//   ranks[]{comm_id, host, pid, rank, nranks, cuda_dev, nvml_dev, bus_id, init_started,
//           init_complete, destroyed, init_seconds (null if unknown), nccl_version,
//           coll_channels, nvls_channels, collnet_channels, p2p_channels, source}
//   processes[]{host, pid, nccl_version, bootstrap_interface, bootstrap_address,
//               network, lines, warnings, ranks (0: never started a communicator), source}
//   transports[]{comm_id, src_rank, dst_rank, src_host, dst_host, transport, channels, gdr}
//   host_links[]{src_host, dst_host, transport, rank_pairs, channels, gdr}  (the matrix by host)
//   network{in_use[], devices[], interfaces[]{host, interface, address},
//           env{NAME: [values]}, nvls_available, nvls_unavailable}
//   warnings[]{class, count, hint, example, location, processes[], peers[], peer_hosts[]}
//     class: interface_not_found, ib_completion_error, connection_closed_by_peer,
//            connect_failed, timeout, cuda_failure, proxy_failure, system_error,
//            version_mismatch, other
// Integers that are unknown are -1; -1 rank/pid never appear in ranks[].

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ddp::nccl {

struct NcclLineStats {
  int64_t bytes = 0;
  int64_t lines = 0;
  int64_t nccl_lines = 0;
  int64_t unknown_nccl_lines = 0;  // NCCL lines of a kind not interpreted
  int64_t non_nccl_lines = 0;
  int64_t error_traces = 0;        // "file.cc:123 -> N"
};

struct NcclVersionCount {
  std::string version;
  int64_t processes = 0;
};

struct NcclCommunicatorInfo {
  std::string comm_id;  // empty: not printed by this NCCL version (grouped by nranks)
  int nranks = -1;
  std::vector<int> ranks_complete;
  std::vector<int> ranks_missing;               // every rank in [0, nranks) not complete
  std::vector<int> ranks_started_not_complete;  // Init START seen, COMPLETE not
  std::vector<int> ranks_not_seen;              // no line at all from this rank
  std::vector<std::string> hosts;
};

struct NcclRankInfo {
  std::string comm_id;
  std::string host;
  int64_t pid = -1;
  int rank = -1;
  int nranks = -1;
  int cuda_dev = -1;
  int nvml_dev = -1;
  std::string bus_id;
  bool init_started = false;
  bool init_complete = false;
  bool destroyed = false;
  double init_seconds = -1;
  std::string nccl_version;
  int coll_channels = -1;
  int nvls_channels = -1;
  int collnet_channels = -1;
  int p2p_channels = -1;
  std::string source;
};

struct NcclProcessInfo {
  std::string host;
  int64_t pid = -1;
  std::string nccl_version;
  std::string bootstrap_interface;
  std::string bootstrap_address;
  std::string network;
  int64_t lines = 0;
  int64_t warnings = 0;
  int ranks = 0;  // ranks it holds in any communicator; 0: it never started an init
  std::string source;
};

struct NcclTransportLink {
  std::string comm_id;
  int src_rank = -1;
  int dst_rank = -1;
  std::string src_host;
  std::string dst_host;
  std::string transport;  // family: P2P/IPC, P2P/CUMEM, SHM, NET/IB, NET/Socket, NVLS, COLLNET/..
  int channels = 0;
  bool gdr = false;
};

struct NcclHostLink {
  std::string src_host;
  std::string dst_host;
  std::string transport;
  int rank_pairs = 0;
  int channels = 0;
  bool gdr = false;
};

struct NcclInterface {
  std::string host;
  std::string interface;
  std::string address;
};

struct NcclNetworkInfo {
  std::vector<std::string> in_use;   // "Using network X", most common first
  std::vector<std::string> devices;  // "NET/IB : Using [0]mlx5_0:1/IB ..." (distinct)
  std::vector<NcclInterface> interfaces;
  std::map<std::string, std::vector<std::string>> env;  // NCCL_* echoed by NCCL
  int64_t nvls_available = 0;
  int64_t nvls_unavailable = 0;
};

struct NcclWarningGroup {
  std::string cls;
  int64_t count = 0;
  std::string hint;
  std::string example;
  std::string location;
  std::vector<std::string> processes;  // "host:pid"
  std::vector<std::string> peers;
  std::vector<std::string> peer_hosts;  // peers resolved to hosts via bootstrap addresses
};

struct NcclDiagnosis {
  std::vector<std::string> files;
  NcclLineStats stats;
  std::vector<NcclVersionCount> versions;
  std::vector<NcclCommunicatorInfo> communicators;
  std::vector<NcclRankInfo> ranks;
  std::vector<NcclProcessInfo> processes;
  std::vector<NcclTransportLink> transports;
  std::vector<NcclHostLink> host_links;
  NcclNetworkInfo network;
  std::vector<NcclWarningGroup> warnings;

  /// True when not a single NCCL line was seen.
  bool empty() const { return stats.nccl_lines == 0; }
};

/// Log text is not guaranteed UTF-8: dump with error_handler_t::replace.
nlohmann::json to_json(const NcclDiagnosis& d);

/// Human-readable summary (several lines, each ending in '\n'). At most
/// max_ranks rank lines are listed (0: all).
std::string render_text(const NcclDiagnosis& d, size_t max_ranks = 64);

}  // namespace ddp::nccl
