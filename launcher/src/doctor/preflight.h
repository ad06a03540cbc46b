#pragma once
// The environment preflight behind `ddplaunch doctor` and `ddplaunch
// --preflight`: GPUs against the requested ranks, driver / CUDA runtime / NCCL
// versions, the socket interfaces NCCL and Gloo will use, the rendezvous
// port, free disk for logs and checkpoints, and which BLAS LibTorch gets.
// Each check is one CheckResult; the whole run takes well under a second
// (the only wait is a 300 ms connect to a remote rendezvous endpoint).

#include <cstdint>
#include <string>
#include <vector>

#include "doctor/check_result.h"
#include "doctor/system_probe.h"

namespace ddp {

struct PreflightInputs {
  std::string nproc_per_node = "auto";  // N | gpu | cpu | auto (as --nproc-per-node)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;        // 0: not checked (ddplaunch picks a free one)
  std::string rdzv_endpoint;  // HOST[:PORT] ([IPv6][:PORT]); empty: not checked
  std::string log_dir;        // empty: ${TMPDIR:-/tmp}/ddplaunch-logs, as ddplaunch
  std::string checkpoint_dir; // empty: not checked
};

/// Thresholds for the log and checkpoint directories.
inline constexpr uint64_t kDiskWarnBytes = uint64_t{1} << 30;   // warn under 1 GiB
inline constexpr uint64_t kDiskFailBytes = uint64_t{100} << 20;  // fail under 100 MiB

/// All checks against the real machine.
std::vector<CheckResult> run_preflight(const PreflightInputs& inputs);
/// All checks against a (faked) probe.
std::vector<CheckResult> run_preflight(const PreflightInputs& inputs, const SystemProbe& probe);

// The families, each usable alone.
std::vector<CheckResult> gpu_checks(const PreflightInputs& inputs, const SystemProbe& probe);
std::vector<CheckResult> network_checks(const PreflightInputs& inputs, const SystemProbe& probe);
std::vector<CheckResult> disk_checks(const PreflightInputs& inputs, const SystemProbe& probe);
std::vector<CheckResult> blas_checks(const PreflightInputs& inputs, const SystemProbe& probe);

/// NCCL_SOCKET_IFNAME's syntax: "eth,ib" (prefixes), "^docker,lo" (exclude),
/// "=eth0" / "^=eth0" (exact names).
struct IfnameFilter {
  bool exclude = false;
  bool exact = false;
  std::vector<std::string> names;
  bool matches(const std::string& ifname) const;  // matches one of names
};
IfnameFilter parse_nccl_ifname(const std::string& value);

/// Why a --rdzv-endpoint value (HOST[:PORT], [IPv6][:PORT]) is malformed; empty when fine.
std::string rdzv_endpoint_error(const std::string& endpoint);

/// Whether --nproc-per-node's value is valid (N > 0, gpu, cpu or auto).
bool valid_nproc_spec(const std::string& spec);

/// "13.0" for 13000.
std::string cuda_version_string(int version);
/// "2.27.7" for ncclGetVersion's 22707 (and 2.8-era 2804 codes).
std::string nccl_version_string(int code);
/// "1.5 GiB".
std::string human_size(uint64_t bytes);

}  // namespace ddp
