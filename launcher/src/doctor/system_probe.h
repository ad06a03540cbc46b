#pragma once
// Everything the preflight checks learn about the machine, behind one struct
// of functions so that unit tests can fake a GPU machine, a missing
// interface or a full disk. real_system_probe() asks the system: dlopen of
// libcuda/libcudart/libnccl/libblas, getifaddrs, sockets, statvfs.

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "topology/launch_plan.h"  // GetEnv
#include "net/system_resolver.h"

namespace ddp {

/// libcuda.so.1 (the driver's user-space library).
struct CudaDriverInfo {
  bool found = false;
  std::string path;      // the file that was loaded
  int version = -1;      // cuDriverGetVersion: 1000*major + 10*minor (12040 = CUDA 12.4)
  int init_result = -1;  // cuInit's CUresult (0 = CUDA_SUCCESS; -1 = not called)
  std::string init_error;  // cuGetErrorName of init_result, e.g. "CUDA_ERROR_NO_DEVICE"
  int device_count = -1;   // cuDeviceGetCount after a successful cuInit
  std::string error;       // why the library could not be used (dlerror)
};

/// libcudart or libnccl.
struct LibraryInfo {
  bool found = false;
  std::string path;
  int version = -1;   // cudaRuntimeGetVersion (like the driver's) or ncclGetVersion's code
  std::string error;  // where it was looked for / why it did not load
};

struct NetAddress {
  std::string address;  // numeric, e.g. "192.0.2.2" or "fd00::2"
  bool ipv6 = false;
  bool loopback6 = false;  // ::1 (NCCL skips it)
};

struct NetInterface {
  std::string name;
  bool up = false;
  std::vector<NetAddress> addresses;  // IPv4 first
};

/// The outcome of a socket operation: error 0 = success, an errno value, or
/// kUnresolved when the host name did not resolve (message says why).
struct SocketOutcome {
  static constexpr int kUnresolved = -1;
  int error = 0;
  std::string message;
  std::string local_address;  // route_to: the source address the kernel picked
};

/// A directory's file system. The directory may not exist yet: the nearest
/// existing ancestor is measured (ddplaunch creates the rest).
struct DiskInfo {
  bool ok = false;           // statvfs succeeded
  std::string probed;        // the existing directory that was measured
  uint64_t free_bytes = 0;   // available to this user
  bool writable = false;     // this user can create files there
  std::string error;         // why not ok / not writable
};

/// Which library provides libblas.so.3.
struct BlasInfo {
  std::string path;  // resolved file; empty when none was found
  std::string via;   // how it was found, e.g. "/etc/alternatives/libblas.so.3-x86_64-linux-gnu"
  bool has_openblas = false;  // exports openblas_get_config
  bool has_mkl = false;       // exports mkl_get_version_string / MKL_Get_Version_String
  bool has_blis = false;      // exports bli_info_get_version_str
  std::string config;         // openblas_get_config(), when OpenBLAS
  std::string core;           // openblas_get_corename(): the kernels it picked, e.g. "Haswell"
  std::string error;
};

struct SystemProbe {
  GetEnv getenv;
  std::string proc_root = "/proc";  // driver: PROC/driver/nvidia/{gpus,version}
  std::function<CudaDriverInfo()> cuda_driver;
  std::function<LibraryInfo()> cuda_runtime;
  std::function<LibraryInfo()> nccl;
  std::function<std::vector<NetInterface>()> interfaces;
  /// Binds host:port for TCP. EADDRNOTAVAIL: host is not an address of this machine.
  std::function<SocketOutcome(const std::string& host, int port)> bind_port;
  /// TCP connect with a timeout.
  std::function<SocketOutcome(const std::string& host, int port, int timeout_ms)> connect_port;
  /// A host name as the system resolves it (getaddrinfo, so nsswitch: files,
  /// NIS, LDAP, DNS) and as DNS alone does (system_resolver.h).
  std::function<ResolvedHost(const std::string& host)> resolve_host;
  std::function<ResolvedHost(const std::string& host)> resolve_dns;
  /// Connected UDP socket: which local address the route to host uses.
  std::function<SocketOutcome(const std::string& host, int port)> route_to;
  std::function<DiskInfo(const std::string& dir)> disk;
  std::function<BlasInfo()> blas;
  /// The CPU's feature flags (PROC/cpuinfo); empty where it lists none.
  std::function<std::set<std::string>()> cpu_flags;
};

/// The file Debian's alternatives system makes libblas.so.3 (path and via
/// only), without loading it; an empty path when ETC/alternatives names none.
BlasInfo blas_alternative(const std::string& etc_root = "/etc");

/// The real machine. proc_root and etc_root move /proc and /etc (tests).
SystemProbe real_system_probe(const std::string& proc_root = "/proc", const std::string& etc_root = "/etc");

}  // namespace ddp
