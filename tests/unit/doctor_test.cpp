// `ddplaunch doctor` / --preflight checks against a faked SystemProbe: a
// machine without a GPU, a GPU machine, mismatched drivers, missing
// interfaces, busy ports, full disks and the reference BLAS.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include "doctor/doctor_command.h"
#include "doctor/preflight.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A CPU machine: lo and eth0, no driver, CUDA 13.0 runtime and NCCL 2.27.7 on
// disk, plenty of disk, OpenBLAS; every port free, remote hosts answer.
struct Fake {
  std::map<std::string, std::string> env;
  std::string proc_root = "/nonexistent-proc";
  CudaDriverInfo driver;
  LibraryInfo runtime{true, "/usr/local/cuda/lib64/libcudart.so.13", 13000, ""};
  LibraryInfo nccl{true, "/usr/local/cuda/lib64/libnccl.so.2", 22707, ""};
  std::vector<NetInterface> ifs{{"lo", true, {{"127.0.0.1", false, false}, {"::1", true, true}}},
                                {"ifb0", false, {}},
                                {"eth0", true, {{"192.0.2.2", false, false}, {"fd00::2", true, false}}}};
  SocketOutcome bind{0, "", ""};
  SocketOutcome connect{0, "", ""};
  SocketOutcome route{0, "", "192.0.2.2"};
  std::map<std::string, DiskInfo> disks;
  DiskInfo default_disk{true, "", uint64_t{50} << 30, true, ""};
  BlasInfo blas{"/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3",
                "/etc/alternatives/libblas.so.3-x86_64-linux-gnu", true, false, false,
                "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64", "Haswell", ""};
  std::set<std::string> cpu_flags{"sse4_2", "avx", "avx2", "fma"};
  // Every name resolves, the same through the system and through DNS.
  ResolvedHost system_answer{{"192.0.2.10"}, ""};
  ResolvedHost dns_answer{{"192.0.2.10"}, ""};
  // What the checks asked for.
  std::vector<std::string> bound, connected, routed, measured, resolved;

  SystemProbe probe() {
    SystemProbe p;
    p.getenv = [this](const char* name) -> std::optional<std::string> {
      auto it = env.find(name);
      return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
    p.proc_root = proc_root;
    p.cuda_driver = [this] { return driver; };
    p.cuda_runtime = [this] { return runtime; };
    p.nccl = [this] { return nccl; };
    p.interfaces = [this] { return ifs; };
    p.bind_port = [this](const std::string& h, int port) {
      bound.push_back(h + ":" + std::to_string(port));
      return bind;
    };
    p.connect_port = [this](const std::string& h, int port, int timeout_ms) {
      connected.push_back(h + ":" + std::to_string(port) + "/" + std::to_string(timeout_ms));
      return connect;
    };
    p.route_to = [this](const std::string& h, int) {
      routed.push_back(h);
      return route;
    };
    p.disk = [this](const std::string& dir) {
      measured.push_back(dir);
      auto it = disks.find(dir);
      DiskInfo d = it == disks.end() ? default_disk : it->second;
      if (d.probed.empty()) d.probed = dir;
      return d;
    };
    p.blas = [this] { return blas; };
    p.cpu_flags = [this] { return cpu_flags; };
    p.resolve_host = [this](const std::string& h) {
      resolved.push_back("system:" + h);
      return system_answer;
    };
    p.resolve_dns = [this](const std::string& h) {
      resolved.push_back("dns:" + h);
      return dns_answer;
    };
    return p;
  }
};

CheckResult find(const std::vector<CheckResult>& results, const std::string& name) {
  for (const auto& r : results) {
    if (r.name == name) return r;
  }
  throw std::runtime_error("no check named " + name);
}

bool has(const std::vector<CheckResult>& results, const std::string& name) {
  for (const auto& r : results) {
    if (r.name == name) return true;
  }
  return false;
}

// A fake /proc with the NVIDIA driver listing `gpus` devices.
class FakeProc {
 public:
  explicit FakeProc(int gpus, const std::string& version_line =
                                  "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024") {
    root = fs::temp_directory_path() / ("ddp_doctor_proc_" + std::to_string(::getpid()) + "_" + std::to_string(next++));
    fs::create_directories(root / "driver/nvidia/gpus");
    for (int i = 0; i < gpus; ++i) fs::create_directories(root / "driver/nvidia/gpus" / ("0000:0" + std::to_string(i) + ":00.0"));
    std::ofstream(root / "driver/nvidia/version") << version_line << "\nGCC version:  gcc version 12.2.0\n";
  }
  ~FakeProc() { fs::remove_all(root); }
  fs::path root;
  static inline int next = 0;
};

CudaDriverInfo working_driver(int version, int count) {
  CudaDriverInfo d;
  d.found = true;
  d.path = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15";
  d.version = version;
  d.init_result = 0;
  d.device_count = count;
  return d;
}

PreflightInputs nproc(const std::string& spec) {
  PreflightInputs in;
  in.nproc_per_node = spec;
  return in;
}

// ------------------------------------------------------------------ GPUs

TEST(DoctorGpu, NoGpuMachineSaysSoPlainly) {
  Fake f;
  const auto r = gpu_checks(nproc("auto"), f.probe());
  EXPECT_EQ(find(r, "GPUs").level, CheckLevel::kOk);
  EXPECT_EQ(find(r, "GPUs").reason, "no NVIDIA GPU visible: jobs run on CPU with Gloo");
  EXPECT_EQ(find(r, "NVIDIA driver").level, CheckLevel::kOk);
  EXPECT_THAT(find(r, "NVIDIA driver").reason, HasSubstr("none installed"));
  EXPECT_EQ(find(r, "CUDA runtime").level, CheckLevel::kOk);
  EXPECT_THAT(find(r, "CUDA runtime").reason, HasSubstr("CUDA runtime 13.0 (/usr/local/cuda/lib64/libcudart.so.13)"));
  EXPECT_THAT(find(r, "CUDA runtime").reason, HasSubstr("no NVIDIA driver to run it"));
  EXPECT_EQ(find(r, "NCCL").level, CheckLevel::kOk);
  EXPECT_THAT(find(r, "NCCL").reason, HasSubstr("NCCL 2.27.7"));
  EXPECT_THAT(find(r, "NCCL").reason, HasSubstr("unused without a GPU"));
}

TEST(DoctorGpu, NumericAndCpuNprocWithoutGpuAreFine) {
  Fake f;
  EXPECT_EQ(find(gpu_checks(nproc("4"), f.probe()), "GPUs").level, CheckLevel::kOk);
  EXPECT_EQ(find(gpu_checks(nproc("cpu"), f.probe()), "GPUs").level, CheckLevel::kOk);
}

TEST(DoctorGpu, NprocGpuWithoutGpuFails) {
  Fake f;
  const auto& g = find(gpu_checks(nproc("gpu"), f.probe()), "GPUs");
  EXPECT_EQ(g.level, CheckLevel::kFail);
  EXPECT_THAT(g.reason, HasSubstr("no NVIDIA GPU visible"));
  EXPECT_THAT(g.reason, HasSubstr("--nproc-per-node=gpu needs at least one"));
}

TEST(DoctorGpu, GpuMachineCountsDevicesAndComparesVersions) {
  FakeProc proc(4);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver = working_driver(12040, 4);
  f.runtime = {true, "/opt/libcudart.so.12", 12010, ""};
  const auto r = gpu_checks(nproc("gpu"), f.probe());
  EXPECT_EQ(find(r, "GPUs").level, CheckLevel::kOk);
  EXPECT_EQ(find(r, "GPUs").reason, "4 GPUs visible: one rank per GPU with --nproc-per-node=gpu");
  EXPECT_EQ(find(r, "NVIDIA driver").level, CheckLevel::kOk);
  EXPECT_THAT(find(r, "NVIDIA driver").reason, HasSubstr("kernel module 550.54.15"));
  EXPECT_THAT(find(r, "NVIDIA driver").reason, HasSubstr("supports CUDA up to 12.4"));
  EXPECT_EQ(find(r, "CUDA runtime").level, CheckLevel::kOk);
  EXPECT_EQ(find(r, "CUDA runtime").reason, "CUDA runtime 12.1 (/opt/libcudart.so.12); the driver supports CUDA 12.4");
  EXPECT_EQ(find(r, "NCCL").reason, "NCCL 2.27.7 (/usr/local/cuda/lib64/libnccl.so.2)");
}

TEST(DoctorGpu, MoreRanksThanGpusWarns) {
  FakeProc proc(2);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver = working_driver(12040, 2);
  const auto& g = find(gpu_checks(nproc("8"), f.probe()), "GPUs");
  EXPECT_EQ(g.level, CheckLevel::kWarn);
  EXPECT_THAT(g.reason, HasSubstr("--nproc-per-node=8 but only 2 GPUs visible"));
  EXPECT_THAT(g.reason, HasSubstr("Duplicate GPU detected"));
  const auto& fewer = find(gpu_checks(nproc("1"), f.probe()), "GPUs");
  EXPECT_EQ(fewer.level, CheckLevel::kOk);
  EXPECT_EQ(fewer.reason, "2 GPUs visible for 1 rank (1 idle)");
}

TEST(DoctorGpu, ProcCountIsUsedWithoutLibcudaAndNarrowedByCudaVisibleDevices) {
  FakeProc proc(4);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver.error = "libcuda.so.1: cannot open shared object file";
  f.env["CUDA_VISIBLE_DEVICES"] = "1,3";
  const auto r = gpu_checks(nproc("auto"), f.probe());
  EXPECT_EQ(find(r, "GPUs").reason, "2 GPUs visible: one rank per GPU with --nproc-per-node=auto");
  // The kernel module is there but not its user-space library.
  EXPECT_EQ(find(r, "NVIDIA driver").level, CheckLevel::kFail);
  EXPECT_THAT(find(r, "NVIDIA driver").reason, HasSubstr("kernel module 550.54.15 is loaded but libcuda.so.1 does not load"));
  EXPECT_THAT(find(r, "NVIDIA driver").reason, HasSubstr("cannot open shared object file"));
}

TEST(DoctorGpu, EmptyCudaVisibleDevicesHidesGpus) {
  FakeProc proc(2);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver = working_driver(12040, 0);
  f.driver.init_result = 100;
  f.driver.init_error = "CUDA_ERROR_NO_DEVICE";
  f.driver.device_count = -1;
  f.env["CUDA_VISIBLE_DEVICES"] = "";
  const auto& g = find(gpu_checks(nproc("auto"), f.probe()), "GPUs");
  EXPECT_EQ(g.level, CheckLevel::kWarn);
  EXPECT_EQ(g.reason, "CUDA_VISIBLE_DEVICES='' hides the 2 GPUs the driver lists: jobs run on CPU with Gloo");
  EXPECT_EQ(find(gpu_checks(nproc("gpu"), f.probe()), "GPUs").level, CheckLevel::kFail);
}

TEST(DoctorGpu, BrokenDriverFailsWithItsError) {
  FakeProc proc(8);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver = working_driver(12040, -1);
  f.driver.init_result = 999;
  f.driver.init_error = "CUDA_ERROR_UNKNOWN";
  const auto r = gpu_checks(nproc("gpu"), f.probe());
  EXPECT_EQ(find(r, "GPUs").level, CheckLevel::kFail);
  EXPECT_THAT(find(r, "GPUs").reason, HasSubstr("the driver lists 8 GPUs but cuInit failed: CUDA_ERROR_UNKNOWN (999)"));
  EXPECT_EQ(find(r, "NVIDIA driver").level, CheckLevel::kFail);
  EXPECT_THAT(find(r, "NVIDIA driver").reason, HasSubstr("reboot"));
}

TEST(DoctorGpu, RuntimeNewerThanDriverFails) {
  FakeProc proc(1);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver = working_driver(12040, 1);
  const auto& r = find(gpu_checks(nproc("auto"), f.probe()), "CUDA runtime");  // runtime 13.0
  EXPECT_EQ(r.level, CheckLevel::kFail);
  EXPECT_THAT(r.reason, HasSubstr("CUDA runtime 13.0"));
  EXPECT_THAT(r.reason, HasSubstr("needs a newer driver: this one supports CUDA 12.4 only"));
}

TEST(DoctorGpu, NewerMinorRuntimeWarnsAboutMinorVersionCompatibility) {
  FakeProc proc(1);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver = working_driver(12020, 1);
  f.runtime.version = 12060;
  const auto& r = find(gpu_checks(nproc("auto"), f.probe()), "CUDA runtime");
  EXPECT_EQ(r.level, CheckLevel::kWarn);
  EXPECT_THAT(r.reason, HasSubstr("minor version compatibility"));
}

TEST(DoctorGpu, MissingNcclWarnsGlooOnly) {
  Fake f;
  f.nccl = {false, "", -1, "libnccl.so.2: cannot open shared object file"};
  const auto& n = find(gpu_checks(nproc("auto"), f.probe()), "NCCL");
  EXPECT_EQ(n.level, CheckLevel::kWarn);
  EXPECT_THAT(n.reason, HasSubstr("the NCCL backend is unavailable; Gloo only"));
}

TEST(DoctorGpu, MissingRuntimeOnGpuMachineWarns) {
  FakeProc proc(1);
  Fake f;
  f.proc_root = proc.root.string();
  f.driver = working_driver(12040, 1);
  f.runtime = {};
  const auto& r = find(gpu_checks(nproc("auto"), f.probe()), "CUDA runtime");
  EXPECT_EQ(r.level, CheckLevel::kWarn);
  EXPECT_THAT(r.reason, HasSubstr("no libcudart found"));
}

TEST(DoctorVersions, Strings) {
  EXPECT_EQ(cuda_version_string(13000), "13.0");
  EXPECT_EQ(cuda_version_string(12040), "12.4");
  EXPECT_EQ(cuda_version_string(11080), "11.8");
  EXPECT_EQ(nccl_version_string(22707), "2.27.7");
  EXPECT_EQ(nccl_version_string(21903), "2.19.3");
  EXPECT_EQ(nccl_version_string(2804), "2.8.4");
  EXPECT_EQ(human_size(512), "512 B");
  EXPECT_EQ(human_size(uint64_t{3} << 29), "1.5 GiB");
}

TEST(DoctorVersions, NprocSpecs) {
  for (const char* ok : {"1", "8", "gpu", "cpu", "auto"}) EXPECT_TRUE(valid_nproc_spec(ok)) << ok;
  for (const char* bad : {"", "0", "-1", "two", "1.5", "GPU"}) EXPECT_FALSE(valid_nproc_spec(bad)) << bad;
}

// ------------------------------------------------------------- interfaces

TEST(DoctorIfname, ParsesNcclSyntax) {
  auto f = parse_nccl_ifname("eth,ib");
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_TRUE(f.matches("ib1"));
  EXPECT_FALSE(f.matches("lo"));
  f = parse_nccl_ifname("^docker,lo");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.matches("docker0"));
  f = parse_nccl_ifname("^=eth0");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.exact);
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_FALSE(f.matches("eth01"));
  f = parse_nccl_ifname("=eth0,,ib0:1");
  EXPECT_EQ(f.names, (std::vector<std::string>{"eth0", "ib0"}));
}

TEST(DoctorIfname, MissingInterfaceFailsNamingIt) {
  Fake f;
  f.env["NCCL_SOCKET_IFNAME"] = "bogus0";
  const auto& c = find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("'bogus0': no interface bogus0"));
  EXPECT_THAT(c.reason, HasSubstr("interfaces here: lo, ifb0, eth0"));
}

TEST(DoctorIfname, PrefixSelectsFirstAddressedInterface) {
  Fake f;
  f.env["NCCL_SOCKET_IFNAME"] = "eth";
  const auto& c = find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_EQ(c.reason, "'eth': NCCL uses eth0 (192.0.2.2)");
}

TEST(DoctorIfname, ExactMatchNeedsTheWholeName) {
  Fake f;
  f.env["NCCL_SOCKET_IFNAME"] = "=eth";
  const auto& c = find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("no interface named eth"));
}

TEST(DoctorIfname, OneMissingAmongSeveralWarns) {
  Fake f;
  f.env["NCCL_SOCKET_IFNAME"] = "eth0,bogus0";
  const auto& c = find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kWarn);
  EXPECT_EQ(c.reason, "'eth0,bogus0': no interface bogus0; NCCL uses eth0 (192.0.2.2)");
}

TEST(DoctorIfname, InterfaceWithoutAddressFails) {
  Fake f;
  f.env["NCCL_SOCKET_IFNAME"] = "ifb0";
  const auto& c = find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("ifb0 has no IP address"));
}

TEST(DoctorIfname, ExcludingEverythingFails) {
  Fake f;
  f.env["NCCL_SOCKET_IFNAME"] = "^eth,lo";
  const auto& c = find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("excludes every interface with an address"));
  f.env["NCCL_SOCKET_IFNAME"] = "^docker,lo";
  EXPECT_EQ(find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME").reason, "'^docker,lo': NCCL uses eth0 (192.0.2.2)");
}

TEST(DoctorIfname, GlooNamesMustExistExactly) {
  Fake f;
  f.env["GLOO_SOCKET_IFNAME"] = "eth0,wlan9";
  const auto& c = find(network_checks({}, f.probe()), "GLOO_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("no interface wlan9"));
  f.env["GLOO_SOCKET_IFNAME"] = "eth0";
  EXPECT_EQ(find(network_checks({}, f.probe()), "GLOO_SOCKET_IFNAME").reason, "'eth0': Gloo uses eth0 (192.0.2.2)");
  f.env.erase("GLOO_SOCKET_IFNAME");
  EXPECT_FALSE(has(network_checks({}, f.probe()), "GLOO_SOCKET_IFNAME"));
}

TEST(DoctorIfname, UnsetReportsTheRouteToTheRendezvousHost) {
  Fake f;
  PreflightInputs in;
  in.rdzv_endpoint = "10.1.2.3:29400";
  f.bind.error = EADDRNOTAVAIL;
  const auto r = network_checks(in, f.probe());
  EXPECT_EQ(f.routed, std::vector<std::string>{"10.1.2.3"});
  const auto& c = find(r, "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_THAT(c.reason, HasSubstr("unset; eth0 (192.0.2.2) reaches 10.1.2.3"));
}

TEST(DoctorIfname, UnsetOnOneNodeReportsNcclsDefaultChoice) {
  Fake f;
  const auto& c = find(network_checks({}, f.probe()), "NCCL_SOCKET_IFNAME");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_THAT(c.reason, HasSubstr("unset; NCCL would pick eth0 (192.0.2.2)"));
  EXPECT_TRUE(f.routed.empty());
}

// ------------------------------------------------------------------ ports

TEST(DoctorPort, NoPortGivenIsOk) {
  Fake f;
  const auto& c = find(network_checks({}, f.probe()), "rendezvous port");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_THAT(c.reason, HasSubstr("ddplaunch picks a free port"));
  EXPECT_TRUE(f.bound.empty());
}

TEST(DoctorPort, FreeLocalPortIsOk) {
  Fake f;
  PreflightInputs in;
  in.master_port = 29500;
  const auto& c = find(network_checks(in, f.probe()), "master port");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_EQ(c.reason, "127.0.0.1:29500 is free on this host (--master-port)");
  EXPECT_EQ(f.bound, std::vector<std::string>{"127.0.0.1:29500"});
}

TEST(DoctorPort, BusyLocalPortFailsNamingIt) {
  Fake f;
  f.bind = {EADDRINUSE, "Address already in use", ""};
  PreflightInputs in;
  in.rdzv_endpoint = "localhost:29400";
  const auto& c = find(network_checks(in, f.probe()), "rendezvous port");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("port 29400 is in use on localhost (--rdzv-endpoint)"));
  EXPECT_TRUE(f.connected.empty());
}

TEST(DoctorPort, RemoteEndpointIsConnectedWith300msTimeout) {
  Fake f;
  f.bind.error = EADDRNOTAVAIL;
  PreflightInputs in;
  in.rdzv_endpoint = "node0.cluster";  // default port
  auto c = find(network_checks(in, f.probe()), "rendezvous port");
  EXPECT_EQ(f.connected, std::vector<std::string>{"node0.cluster:29400/300"});
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_THAT(c.reason, HasSubstr("node0.cluster:29400 is reachable"));

  f.connect = {ETIMEDOUT, "Connection timed out", ""};
  c = find(network_checks(in, f.probe()), "rendezvous port");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("no answer within 300 ms"));

  f.connect = {ECONNREFUSED, "Connection refused", ""};
  c = find(network_checks(in, f.probe()), "rendezvous port");
  EXPECT_EQ(c.level, CheckLevel::kWarn);
  EXPECT_THAT(c.reason, HasSubstr("nothing listens on port 29400 yet"));

  f.connect = {EHOSTUNREACH, "No route to host", ""};
  c = find(network_checks(in, f.probe()), "rendezvous port");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("No route to host"));
}

TEST(DoctorPort, UnresolvableHostFails) {
  Fake f;
  f.bind = {SocketOutcome::kUnresolved, "Name or service not known", ""};
  PreflightInputs in;
  in.rdzv_endpoint = "no-such-host.invalid:1234";
  const auto& c = find(network_checks(in, f.probe()), "rendezvous port");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("host no-such-host.invalid does not resolve: Name or service not known"));
}

TEST(DoctorRendezvousHost, ANameTheSystemAndDnsAgreeOnIsOk) {
  Fake f;
  PreflightInputs in;
  in.rdzv_endpoint = "node0.cluster:29400";
  const auto c = find(network_checks(in, f.probe()), "rendezvous host");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_EQ(c.reason, "node0.cluster resolves to 192.0.2.10 (the system and DNS agree)");
  EXPECT_EQ(f.resolved, (std::vector<std::string>{"system:node0.cluster", "dns:node0.cluster"}));
}

TEST(DoctorRendezvousHost, ANameOnlyTheHostsFileKnowsIsSaidToResolveViaTheSystemButNotViaDns) {
  Fake f;
  f.system_answer = {{"10.0.0.11", "fd00::11"}, ""};
  f.dns_answer = {{}, "DNS does not know the name"};
  PreflightInputs in;
  in.rdzv_endpoint = "n1:29400";
  const auto c = find(network_checks(in, f.probe()), "rendezvous host");
  EXPECT_EQ(c.level, CheckLevel::kOk);  // ddplaunch resolves through the system
  EXPECT_THAT(c.reason, HasSubstr("n1 resolves via the system but not via DNS (DNS does not know the name): "
                                  "10.0.0.11, fd00::11;"));
}

TEST(DoctorRendezvousHost, AForcedGrpcDnsResolverMakesSuchANameFail) {
  Fake f;
  f.env["GRPC_DNS_RESOLVER"] = "ares";
  f.system_answer = {{"10.0.0.11"}, ""};
  f.dns_answer = {{}, "no DNS server answered"};
  PreflightInputs in;
  in.rdzv_endpoint = "n1";
  const auto c = find(network_checks(in, f.probe()), "rendezvous host");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("GRPC_DNS_RESOLVER=ares in the environment"));
  f.env["GRPC_DNS_RESOLVER"] = "native";
  EXPECT_EQ(find(network_checks(in, f.probe()), "rendezvous host").level, CheckLevel::kOk);
}

TEST(DoctorRendezvousHost, DifferentAnswersAreBothShown) {
  Fake f;
  f.system_answer = {{"10.0.0.11"}, ""};
  f.dns_answer = {{"198.51.100.7"}, ""};
  PreflightInputs in;
  in.rdzv_endpoint = "n1";
  EXPECT_EQ(find(network_checks(in, f.probe()), "rendezvous host").reason,
            "n1 resolves to 10.0.0.11 through the system; DNS alone says 198.51.100.7");
}

TEST(DoctorRendezvousHost, ANameTheSystemCannotResolveFails) {
  Fake f;
  f.system_answer = {{}, "Name or service not known"};
  PreflightInputs in;
  in.rdzv_endpoint = "trainr0:29400";
  const auto c = find(network_checks(in, f.probe()), "rendezvous host");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_THAT(c.reason, HasSubstr("cannot resolve trainr0 through the system (Name or service not known)"));
}

TEST(DoctorRendezvousHost, AddressesAndLocalhostNeedNoDns) {
  Fake f;
  PreflightInputs in;
  in.rdzv_endpoint = "[fd00::11]:29400";
  EXPECT_FALSE(has(network_checks(in, f.probe()), "rendezvous host"));
  in.rdzv_endpoint = "10.0.0.11";
  EXPECT_FALSE(has(network_checks(in, f.probe()), "rendezvous host"));
  EXPECT_TRUE(f.resolved.empty());
  in.rdzv_endpoint = "localhost:29400";
  f.system_answer = {{"127.0.0.1"}, ""};
  EXPECT_EQ(find(network_checks(in, f.probe()), "rendezvous host").reason, "localhost resolves to 127.0.0.1: this machine only");
  EXPECT_EQ(f.resolved, std::vector<std::string>{"system:localhost"});
}

TEST(DoctorPort, EndpointSyntax) {
  EXPECT_EQ(rdzv_endpoint_error("host"), "");
  EXPECT_EQ(rdzv_endpoint_error("host:29400"), "");
  EXPECT_EQ(rdzv_endpoint_error("[::1]:29400"), "");
  EXPECT_EQ(rdzv_endpoint_error("fd00::2"), "");
  EXPECT_THAT(rdzv_endpoint_error("host:abc"), HasSubstr("not a number"));
  EXPECT_THAT(rdzv_endpoint_error("host:70000"), HasSubstr("out of range"));
  EXPECT_THAT(rdzv_endpoint_error(":29400"), HasSubstr("missing host"));
  EXPECT_THAT(rdzv_endpoint_error("[::1"), HasSubstr("[IPv6]"));
}

// ------------------------------------------------------------------- disk

TEST(DoctorDisk, DefaultLogDirFollowsTmpdir) {
  Fake f;
  f.env["TMPDIR"] = "/scratch";
  const auto r = disk_checks({}, f.probe());
  EXPECT_EQ(f.measured, std::vector<std::string>{"/scratch/ddplaunch-logs"});
  EXPECT_EQ(find(r, "log dir").level, CheckLevel::kOk);
  EXPECT_EQ(find(r, "log dir").reason, "50.0 GiB free in /scratch/ddplaunch-logs");
  EXPECT_FALSE(has(r, "checkpoint dir"));
}

TEST(DoctorDisk, LevelsByFreeSpace) {
  Fake f;
  PreflightInputs in;
  in.log_dir = "/logs";
  in.checkpoint_dir = "/ckpt";
  f.disks["/logs"] = {true, "/logs", uint64_t{500} << 20, true, ""};
  f.disks["/ckpt"] = {true, "/", uint64_t{50} << 20, true, ""};
  const auto r = disk_checks(in, f.probe());
  EXPECT_EQ(find(r, "log dir").level, CheckLevel::kWarn);
  EXPECT_EQ(find(r, "log dir").reason, "only 500.0 MiB free in /logs (under 1.0 GiB)");
  EXPECT_EQ(find(r, "checkpoint dir").level, CheckLevel::kFail);
  EXPECT_EQ(find(r, "checkpoint dir").reason,
            "only 50.0 MiB free in /ckpt (created at launch under /) (under 100.0 MiB): the job would run out of room");
}

TEST(DoctorDisk, NotWritableFails) {
  Fake f;
  PreflightInputs in;
  in.checkpoint_dir = "/ro/ckpt";
  f.disks["/ro/ckpt"] = {true, "/ro", uint64_t{50} << 30, false, "read-only file system"};
  const auto& c = find(disk_checks(in, f.probe()), "checkpoint dir");
  EXPECT_EQ(c.level, CheckLevel::kFail);
  EXPECT_EQ(c.reason, "/ro is not writable (needed to create /ro/ckpt): read-only file system");
}

TEST(DoctorDisk, RealProbeMeasuresTheNearestExistingDirectory) {
  const fs::path base = fs::temp_directory_path() / ("ddp_doctor_disk_" + std::to_string(::getpid()));
  fs::create_directories(base);
  const DiskInfo d = real_system_probe().disk((base / "a" / "b").string());
  EXPECT_TRUE(d.ok);
  EXPECT_EQ(d.probed, base.string());
  EXPECT_GT(d.free_bytes, 0u);
  EXPECT_TRUE(d.writable || ::geteuid() != 0);
  fs::remove_all(base);
}

// ------------------------------------------------------------------- BLAS

TEST(DoctorBlas, OpenBlasIsOk) {
  Fake f;
  const auto& c = find(blas_checks({}, f.probe()), "BLAS");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_THAT(c.reason, HasSubstr("OpenBLAS 0.3.21"));
  EXPECT_THAT(c.reason, HasSubstr("openblas-pthread/libblas.so.3"));
}

TEST(DoctorBlas, OpenBlasOnGenericKernelsWarnsAndNamesTheCoreType) {
  Fake f;
  f.blas.config = "OpenBLAS 0.3.21 NO_LAPACKE DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64";
  f.blas.core = "Prescott";
  f.cpu_flags = {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl",
                 "avx512_bf16"};
  const auto& c = find(blas_checks({}, f.probe()), "BLAS");
  EXPECT_EQ(c.level, CheckLevel::kWarn);
  EXPECT_THAT(c.reason, HasSubstr("picks its Prescott kernels on a CPU with AVX-512 with BF16"));
  EXPECT_THAT(c.reason, HasSubstr("OPENBLAS_CORETYPE=Cooperlake"));
  // The same OpenBLAS where the CPU has nothing wider: nothing to say.
  f.cpu_flags = {"sse4_2"};
  EXPECT_EQ(find(blas_checks({}, f.probe()), "BLAS").level, CheckLevel::kOk);
}

TEST(DoctorBlas, ReferenceBlasWarns) {
  Fake f;
  f.blas = {"/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0", "/etc/alternatives/libblas.so.3-x86_64-linux-gnu",
            false, false, false, "", "", ""};
  const auto& c = find(blas_checks({}, f.probe()), "BLAS");
  EXPECT_EQ(c.level, CheckLevel::kWarn);
  EXPECT_THAT(c.reason, HasSubstr("is the reference BLAS: LibTorch runs about 16x slower; install libopenblas0-pthread"));
}

TEST(DoctorBlas, MklAndNoneAreOk) {
  Fake f;
  f.blas = {"/opt/intel/mkl/lib/libmkl_rt.so.2", "dlopen(libblas.so.3)", false, true, false, "", "", ""};
  EXPECT_THAT(find(blas_checks({}, f.probe()), "BLAS").reason, HasSubstr("Intel MKL"));
  f.blas = {};
  const auto& c = find(blas_checks({}, f.probe()), "BLAS");
  EXPECT_EQ(c.level, CheckLevel::kOk);
  EXPECT_THAT(c.reason, HasSubstr("no libblas.so.3"));
}

TEST(DoctorBlas, RealProbeFollowsTheAlternativesLink) {
  const fs::path root = fs::temp_directory_path() / ("ddp_doctor_etc_" + std::to_string(::getpid()));
  fs::create_directories(root / "etc/alternatives");
  fs::create_directories(root / "lib/blas");
  std::ofstream(root / "lib/blas/libblas.so.3") << "not a library\n";
  fs::create_symlink(root / "lib/blas/libblas.so.3", root / "etc/alternatives/libblas.so.3-x86_64-linux-gnu");
  const BlasInfo b = real_system_probe("/proc", (root / "etc").string()).blas();
  EXPECT_EQ(b.path, fs::canonical(root / "lib/blas/libblas.so.3").string());
  EXPECT_FALSE(b.error.empty());  // not an ELF file
  SystemProbe p;
  p.blas = [b] { return b; };
  EXPECT_EQ(find(blas_checks({}, p), "BLAS").level, CheckLevel::kWarn);
  fs::remove_all(root);
}

// ------------------------------------------------------- run and render

TEST(DoctorRun, AllFamiliesAndABrokenProbeDoesNotHideTheRest) {
  Fake f;
  SystemProbe p = f.probe();
  auto r = run_preflight(nproc("auto"), p);
  for (const char* name : {"GPUs", "NVIDIA driver", "CUDA runtime", "NCCL", "NCCL_SOCKET_IFNAME", "rendezvous port",
                           "log dir", "BLAS"}) {
    EXPECT_TRUE(has(r, name)) << name;
  }
  EXPECT_EQ(worst_level(r), CheckLevel::kOk);
  p.interfaces = []() -> std::vector<NetInterface> { throw std::runtime_error("getifaddrs exploded"); };
  r = run_preflight(nproc("auto"), p);
  EXPECT_EQ(find(r, "network checks").level, CheckLevel::kFail);
  EXPECT_THAT(find(r, "network checks").reason, HasSubstr("internal error: getifaddrs exploded"));
  EXPECT_TRUE(has(r, "log dir"));
  EXPECT_TRUE(has(r, "BLAS"));
}

TEST(DoctorRender, TextAndJson) {
  const std::vector<CheckResult> r{{"GPUs", CheckLevel::kOk, "no NVIDIA GPU visible"},
                                   {"NCCL", CheckLevel::kWarn, "not found"},
                                   {"log dir", CheckLevel::kFail, "full"}};
  EXPECT_EQ(render_checks_text(r, 0.0412),
            "ok    GPUs: no NVIDIA GPU visible\n"
            "warn  NCCL: not found\n"
            "fail  log dir: full\n"
            "summary: 1 ok, 1 warn, 1 fail (3 checks in 0.04 s)\n");
  const auto j = render_checks_json(r, 0.5);
  EXPECT_EQ(j["checks"].size(), 3u);
  EXPECT_EQ(j["checks"][1]["level"], "warn");
  EXPECT_EQ(j["checks"][2]["name"], "log dir");
  EXPECT_EQ(j["summary"]["fail"], 1);
  EXPECT_EQ(j["result"], "fail");
}

}  // namespace
}  // namespace ddp
