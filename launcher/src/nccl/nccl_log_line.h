#pragma once
// One line of NCCL debug output (NCCL_DEBUG=VERSION|WARN|INFO|TRACE), parsed
// without allocating: every string_view points into the caller's line, so a
// NcclLogLine lives no longer than the text it came from.
//
// Accepted shapes (NCCL 2.12 ... 2.28), anything in front of the header (a
// timestamp, "[1,2]<stdout>:", "host: ", a logging prefix) is skipped:
//   host:pid:tid [dev] NCCL INFO <message>
//   [2026-12-02 18:47:53] host:pid:tid [dev] file.cc:123 NCCL WARN <message>
//   NCCL version 2.13.4+cuda11.7            (bare, printed by older versions)
// A line that is not NCCL's, or that NCCL wrote but this parser does not know,
// is kNotNccl or kOther; truncated and corrupted lines never throw.
//
// Thread-safety: parse_nccl_line is a pure function.

#include <cstdint>
#include <string_view>

namespace ddp::nccl {

enum class NcclLevel : uint8_t { kNone, kVersion, kInfo, kWarn, kTrace, kAbort };

enum class NcclLineKind : uint8_t {
  kNotNccl,        // no NCCL header: someone else's output
  kOther,          // an NCCL line of a kind not interpreted here
  kVersion,        // NCCL version 2.18.3+cuda12.2           -> version
  kInitStart,      // [api] comm P rank R nranks N cudaDev D [nvmlDev D] busId B [commId C] - Init START
  kInitComplete,   // ... - Init COMPLETE
  kCommEnd,        // ... - Destroy COMPLETE / Abort COMPLETE
  kInitTimings,    // Init timings[ - api]: rank R nranks N total T (...)
  kBootstrap,      // Bootstrap : Using eth0:10.0.0.1<0>     -> iface, address
  kNetDevices,     // NET/IB : Using [0]mlx5_0:1/IB ...; OOB eth0:... -> net, text
  kNetNoDevice,    // NET/IB : No device found.              -> net
  kNetwork,        // Using network IB                       -> text (the network name)
  kEnvOverride,    // NCCL_X set by environment to V / NCCL_X set to V -> env_name, env_value
  kRing,           // Channel 00/02 :    0   1   2   3       -> channel, nchannels
  kTransport,      // Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0 -> channel, src/dst, transport
  kChannelCounts,  // 16 coll channels, 0 collnet channels, 16 nvls channels, 16 p2p channels, ...
  kNvlsSupport,    // NVLS multicast support is [not] available on dev D -> flag
  kErrorTrace,     // init.cc:126 -> 5                       -> location, error_code
  kWarn,           // any WARN line: location, message (classified by nccl_warning.h)
};

enum class TransportDirection : uint8_t { kNone, kSend, kReceive };

struct NcclLogLine {
  NcclLineKind kind = NcclLineKind::kNotNccl;
  NcclLevel level = NcclLevel::kNone;

  // Header (empty/-1 where the line had none).
  std::string_view host;
  std::string_view process_key;  // "host:pid": identifies one process
  int64_t pid = -1;
  int64_t tid = -1;
  int dev = -1;
  std::string_view location;  // "misc/socket.cc:49" in front of WARN, or of "-> N"
  std::string_view message;   // everything after "NCCL INFO "

  // Payload; which fields are set depends on kind (see NcclLineKind).
  std::string_view text;         // version, network name, NET device list, ...
  std::string_view net;          // "IB", "Socket", "OFI" of NET/<net>
  std::string_view iface;        // bootstrap interface
  std::string_view address;      // bootstrap address (without <port>)
  std::string_view env_name;
  std::string_view env_value;
  std::string_view comm_ptr;     // 0x7f30b0000d00
  std::string_view comm_id;      // 0x5ae77eb5ea4ec1ee (2.18+)
  std::string_view bus_id;       // 18000
  std::string_view init_api;     // ncclCommInitRank, ncclCommInitRankConfig, ncclCommSplit, ...
  std::string_view transport;    // P2P/IPC/read, NET/IB/0/GDRDMA, SHM/direct/direct, ...
  std::string_view src_dev;      // the [..] after a rank: cudaDev (new) or busId (old)
  std::string_view dst_dev;
  int rank = -1;
  int nranks = -1;
  int cuda_dev = -1;
  int nvml_dev = -1;
  int channel = -1;
  int nchannels = -1;            // kRing: the MM of NN/MM
  int src_rank = -1;
  int dst_rank = -1;
  int error_code = -1;
  int coll_channels = -1;        // kChannelCounts
  int nvls_channels = -1;
  int collnet_channels = -1;
  int p2p_channels = -1;
  double total_seconds = -1;     // kInitTimings
  bool flag = false;             // kNvlsSupport: available
  TransportDirection direction = TransportDirection::kNone;
};

/// Parses one line (without its '\n'; a trailing '\r' is ignored).
NcclLogLine parse_nccl_line(std::string_view line);

/// The transport family of a `via ...` string: "P2P/IPC", "P2P/CUMEM",
/// "P2P/direct pointer", "SHM", "NET/IB", "NET/Socket", "NET/<plugin>", "NVLS",
/// "COLLNET/<x>"; the trailing device index and flags are dropped.
std::string_view transport_family(std::string_view via);

/// True when a `via ...` string says GPUDirect RDMA (".../GDRDMA").
bool transport_uses_gdr(std::string_view via);

}  // namespace ddp::nccl
