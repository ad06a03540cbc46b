#include "doctor/system_probe.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <link.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "blas/openblas_core.h"
#include "net/tcp_bind.h"
#include "net/tcp_probe.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? e : "unknown dlerror";
}

// The file a dlopen handle came from.
std::string handle_path(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && map->l_name[0] != '\0') {
    std::error_code ec;
    auto p = fs::canonical(map->l_name, ec);
    return ec ? std::string(map->l_name) : p.string();
  }
  return fallback;
}

struct Loaded {
  void* handle = nullptr;
  std::string path;
  std::string error;
};

// Tries each name with the loader's search path, then each directory.
Loaded load_first(const std::vector<std::string>& names, const std::vector<std::string>& dirs, int flags) {
  Loaded out;
  std::vector<std::string> errors;
  for (const auto& name : names) {
    if (void* h = dlopen(name.c_str(), flags)) return {h, handle_path(h, name), ""};
    errors.push_back(dl_error());
  }
  for (const auto& dir : dirs) {
    for (const auto& name : names) {
      const std::string path = dir + "/" + name;
      if (::access(path.c_str(), F_OK) != 0) continue;
      if (void* h = dlopen(path.c_str(), flags)) return {h, handle_path(h, path), ""};
      errors.push_back(dl_error());
    }
  }
  out.error = errors.empty() ? "not found" : errors.front();
  return out;
}

std::vector<std::string> cuda_dirs(const GetEnv& getenv) {
  std::vector<std::string> dirs;
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (auto v = getenv(var); v && !v->empty()) {
      dirs.push_back(*v + "/lib64");
      dirs.push_back(*v + "/lib");
    }
  }
  dirs.push_back("/usr/local/cuda/lib64");
  dirs.push_back("/usr/local/cuda/targets/x86_64-linux/lib");
  dirs.push_back("/usr/local/cuda/targets/sbsa-linux/lib");
  return dirs;
}

CudaDriverInfo probe_cuda_driver() {
  CudaDriverInfo info;
  // Kept loaded: unloading libcuda after cuInit is not safe.
  const Loaded lib = load_first({"libcuda.so.1"}, {}, RTLD_NOW | RTLD_LOCAL);
  if (lib.handle == nullptr) {
    info.error = lib.error;
    return info;
  }
  info.found = true;
  info.path = lib.path;
  using GetVersion = int (*)(int*);
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  using ErrorName = int (*)(int, const char**);
  if (auto f = reinterpret_cast<GetVersion>(dlsym(lib.handle, "cuDriverGetVersion"))) {
    int v = 0;
    if (f(&v) == 0) info.version = v;
  }
  auto init = reinterpret_cast<Init>(dlsym(lib.handle, "cuInit"));
  if (init == nullptr) {
    info.error = "libcuda.so.1 has no cuInit";
    return info;
  }
  info.init_result = init(0);
  if (info.init_result != 0) {
    if (auto name = reinterpret_cast<ErrorName>(dlsym(lib.handle, "cuGetErrorName"))) {
      const char* s = nullptr;
      if (name(info.init_result, &s) == 0 && s != nullptr) info.init_error = s;
    }
    return info;
  }
  if (auto count = reinterpret_cast<Count>(dlsym(lib.handle, "cuDeviceGetCount"))) {
    int n = 0;
    if (count(&n) == 0) info.device_count = n;
  }
  return info;
}

// libcudart.so.N for N from newest to oldest, then the unversioned name.
std::vector<std::string> cudart_names(const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("libcudart.so.", 0) == 0 && std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
    }
  }
  for (const char* n : {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}) {
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  std::sort(names.begin(), names.end(), [](const std::string& a, const std::string& b) {
    return std::strtol(a.c_str() + 13, nullptr, 10) > std::strtol(b.c_str() + 13, nullptr, 10);
  });
  names.push_back("libcudart.so");
  return names;
}

LibraryInfo probe_versioned(const std::vector<std::string>& names, const std::vector<std::string>& dirs,
                            const char* symbol) {
  LibraryInfo info;
  const Loaded lib = load_first(names, dirs, RTLD_LAZY | RTLD_LOCAL);
  if (lib.handle == nullptr) {
    info.error = lib.error;
    return info;
  }
  info.found = true;
  info.path = lib.path;
  using GetVersion = int (*)(int*);
  if (auto f = reinterpret_cast<GetVersion>(dlsym(lib.handle, symbol))) {
    int v = 0;
    if (f(&v) == 0) info.version = v;
  } else {
    info.error = std::string("no ") + symbol;
  }
  // Kept loaded: no CUDA context was made, but a library's exit handlers may
  // expect it to stay mapped.
  return info;
}

std::string numeric_address(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof buf);
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof buf);
  }
  return buf;
}

std::vector<NetInterface> probe_interfaces() {
  std::vector<NetInterface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_name == nullptr) continue;
    auto it = std::find_if(out.begin(), out.end(), [&](const NetInterface& i) { return i.name == a->ifa_name; });
    if (it == out.end()) {
      out.push_back({a->ifa_name, false, {}});
      it = out.end() - 1;
    }
    it->up = it->up || (a->ifa_flags & IFF_UP) != 0;
    if (a->ifa_addr == nullptr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    NetAddress addr{numeric_address(a->ifa_addr), family == AF_INET6, false};
    if (family == AF_INET6) {
      addr.loopback6 = IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr);
    }
    it->addresses.push_back(addr);
  }
  freeifaddrs(list);
  for (auto& i : out) {
    std::stable_sort(i.addresses.begin(), i.addresses.end(),
                     [](const NetAddress& x, const NetAddress& y) { return !x.ipv6 && y.ipv6; });
  }
  return out;
}

// getaddrinfo for one socket type; SocketOutcome::kUnresolved on failure.
addrinfo* resolve(const std::string& host, int port, int socktype, int flags, SocketOutcome& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = flags | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    out.error = SocketOutcome::kUnresolved;
    out.message = gai_strerror(rc);
    return nullptr;
  }
  return found;
}

SocketOutcome probe_bind(const std::string& host, int port) {
  const BindOutcome bound = try_tcp_bind(host, port);
  SocketOutcome out;
  if (!bound.resolve_error.empty()) {
    out.error = SocketOutcome::kUnresolved;
    out.message = bound.resolve_error;
  } else if (bound.error != 0) {
    out.error = bound.error;
    out.message = std::strerror(bound.error);
  }
  return out;
}

SocketOutcome probe_connect(const std::string& host, int port, int timeout_ms) {
  const TcpProbe probe = probe_tcp(host, port, std::chrono::milliseconds(timeout_ms));
  SocketOutcome out;
  if (!probe.resolve_error.empty()) {
    out.error = SocketOutcome::kUnresolved;
    out.message = probe.resolve_error;
    return out;
  }
  out.error = probe.tried.empty() ? EHOSTUNREACH : probe.tried.back().error;
  if (out.error != 0) out.message = std::strerror(out.error);
  return out;
}

SocketOutcome probe_route(const std::string& host, int port) {
  SocketOutcome out;
  addrinfo* found = resolve(host, port, SOCK_DGRAM, 0, out);
  if (found == nullptr) return out;
  out.error = ENETUNREACH;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {  // no packet is sent
      sockaddr_storage local{};
      socklen_t len = sizeof local;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
        out.error = 0;
        out.local_address = numeric_address(reinterpret_cast<sockaddr*>(&local));
      }
    } else {
      out.error = errno;
    }
    close(fd);
    if (out.error == 0) break;
  }
  freeaddrinfo(found);
  if (out.error != 0) out.message = std::strerror(out.error);
  return out;
}

DiskInfo probe_disk(const std::string& dir) {
  DiskInfo info;
  std::error_code ec;
  fs::path p = fs::absolute(dir.empty() ? "." : dir, ec);
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  info.probed = p.string();
  if (!fs::is_directory(p, ec)) {
    info.error = "not a directory";
    return info;
  }
  struct statvfs st {};
  if (statvfs(p.c_str(), &st) != 0) {
    info.error = std::strerror(errno);
    return info;
  }
  info.ok = true;
  info.free_bytes = static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
  if ((st.f_flag & ST_RDONLY) != 0) {
    info.error = "read-only file system";
  } else if (::access(p.c_str(), W_OK | X_OK) != 0) {
    info.error = std::strerror(errno);
  } else {
    info.writable = true;
  }
  return info;
}

BlasInfo probe_blas(const std::string& etc_root) {
  BlasInfo info = blas_alternative(etc_root);
  if (info.path.empty()) {
    if (void* h = dlopen("libblas.so.3", RTLD_LAZY | RTLD_LOCAL)) {
      info.path = handle_path(h, "libblas.so.3");
      info.via = "dlopen(libblas.so.3)";
      dlclose(h);
    } else {
      info.error = dl_error();
      return info;
    }
  }
  void* h = dlopen(info.path.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) {
    info.error = dl_error();
    return info;
  }
  if (auto cfg = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_config"))) {
    info.has_openblas = true;
    if (const char* s = cfg()) info.config = s;
  }
  if (auto core = reinterpret_cast<char* (*)()>(dlsym(h, "openblas_get_corename"))) {
    if (const char* s = core()) info.core = s;
  }
  info.has_mkl = dlsym(h, "mkl_get_version_string") != nullptr || dlsym(h, "MKL_Get_Version_String") != nullptr;
  info.has_blis = dlsym(h, "bli_info_get_version_str") != nullptr;
  dlclose(h);
  return info;
}

// Reads up to the first processor's flags line only: the file lists every
// core, and large machines have hundreds.
std::set<std::string> probe_cpu_flags(const std::string& proc_root) {
  std::ifstream in(proc_root + "/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return cpu_flags_from_cpuinfo(line);
  }
  return {};
}

}  // namespace

BlasInfo blas_alternative(const std::string& etc_root) {
  BlasInfo info;
  for (const char* triplet : {"x86_64-linux-gnu", "aarch64-linux-gnu", "powerpc64le-linux-gnu"}) {
    const fs::path link = fs::path(etc_root) / "alternatives" / (std::string("libblas.so.3-") + triplet);
    std::error_code ec;
    if (!fs::is_symlink(link, ec) && !fs::exists(link, ec)) continue;
    const fs::path target = fs::canonical(link, ec);
    if (ec) continue;
    info.path = target.string();
    info.via = link.string();
    break;
  }
  return info;
}

SystemProbe real_system_probe(const std::string& proc_root, const std::string& etc_root) {
  SystemProbe p;
  p.getenv = process_getenv();
  p.proc_root = proc_root;
  p.cuda_driver = probe_cuda_driver;
  const GetEnv getenv = p.getenv;
  p.cuda_runtime = [getenv] {
    const auto dirs = cuda_dirs(getenv);
    return probe_versioned(cudart_names(dirs), dirs, "cudaRuntimeGetVersion");
  };
  p.nccl = [getenv] { return probe_versioned({"libnccl.so.2"}, cuda_dirs(getenv), "ncclGetVersion"); };
  p.interfaces = probe_interfaces;
  p.bind_port = probe_bind;
  p.connect_port = probe_connect;
  p.resolve_host = resolve_host;
  p.resolve_dns = resolve_host_via_dns;
  p.route_to = probe_route;
  p.disk = probe_disk;
  p.blas = [etc_root] { return probe_blas(etc_root); };
  p.cpu_flags = [proc_root] { return probe_cpu_flags(proc_root); };
  return p;
}

}  // namespace ddp
