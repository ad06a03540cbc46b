#include "metrics/nvml_gpu_reader.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <map>
#include <utility>
#include <vector>

namespace ddp {
namespace {

// ---- The NVML declarations used here, as nvml.h declares them (C ABI). Only
// these: the launcher does not depend on the CUDA toolkit's header.
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
using nvmlEventSet_t = struct nvmlEventSet_st*;
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr int NVML_TEMPERATURE_GPU = 0;
constexpr int NVML_CLOCK_SM = 1;
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x8ULL;
constexpr unsigned long long NVML_VALUE_NOT_AVAILABLE = ~0ULL;
struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};
struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
// The process list's element grew over driver releases; pid and
// usedGpuMemory stay first, so the three differ only in their size.
struct nvmlProcessInfo_v1_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct nvmlProcessInfo_v3_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the Xid, for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// NVML's clock event ("throttle") reason bits, by the names the metrics use.
constexpr std::pair<unsigned long long, const char*> kThrottleReasons[] = {
    {0x1ULL, "gpu_idle"},
    {0x2ULL, "applications_clocks_setting"},
    {0x4ULL, "sw_power_cap"},
    {0x8ULL, "hw_slowdown"},
    {0x10ULL, "sync_boost"},
    {0x20ULL, "sw_thermal_slowdown"},
    {0x40ULL, "hw_thermal_slowdown"},
    {0x80ULL, "hw_power_brake_slowdown"},
    {0x100ULL, "display_clock_setting"},
};

struct NvmlApi {
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*temperature)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*power)(nvmlDevice_t, unsigned int*) = nullptr;  // milliwatts
  nvmlReturn_t (*clock)(nvmlDevice_t, int, unsigned int*) = nullptr;
  nvmlReturn_t (*throttle_reasons)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*ecc_errors)(nvmlDevice_t, int, int, unsigned long long*) = nullptr;
  // Process lists: one of three element layouts (process_info_size says which).
  nvmlReturn_t (*compute_processes)(nvmlDevice_t, unsigned int*, void*) = nullptr;
  nvmlReturn_t (*graphics_processes)(nvmlDevice_t, unsigned int*, void*) = nullptr;
  size_t process_info_size = 0;
  nvmlReturn_t (*event_set_create)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*event_set_free)(nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*event_set_wait)(nvmlEventSet_t, nvmlEventData_t*, unsigned int) = nullptr;
};

template <typename F>
void bind_symbol(void* lib, F& fn, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (void* sym = dlsym(lib, name)) {
      fn = reinterpret_cast<F>(sym);
      return;
    }
  }
}

// Process lists with the newest layout the library has.
void bind_process_lists(void* lib, NvmlApi& api) {
  const std::pair<const char*, size_t> versions[] = {{"_v3", sizeof(nvmlProcessInfo_v3_t)},
                                                     {"_v2", sizeof(nvmlProcessInfo_v2_t)},
                                                     {"", sizeof(nvmlProcessInfo_v1_t)}};
  for (const auto& [suffix, size] : versions) {
    const std::string compute = std::string("nvmlDeviceGetComputeRunningProcesses") + suffix;
    if (void* sym = dlsym(lib, compute.c_str())) {
      api.compute_processes = reinterpret_cast<decltype(api.compute_processes)>(sym);
      const std::string graphics = std::string("nvmlDeviceGetGraphicsRunningProcesses") + suffix;
      api.graphics_processes = reinterpret_cast<decltype(api.graphics_processes)>(dlsym(lib, graphics.c_str()));
      api.process_info_size = size;
      return;
    }
  }
}

class NvmlGpuReader final : public GpuReader {
 public:
  NvmlGpuReader(void* library, NvmlApi api, std::vector<std::pair<int, nvmlDevice_t>> devices)
      : library_(library), api_(api), devices_(std::move(devices)) {
    watch_xids();
  }
  ~NvmlGpuReader() override {
    if (events_ != nullptr && api_.event_set_free) api_.event_set_free(events_);
    api_.shutdown();
    dlclose(library_);
  }

  std::vector<GpuReading> read() override {
    count_xids();
    std::vector<GpuReading> out;
    for (const auto& [index, device] : devices_) out.push_back(read_device(index, device));
    return out;
  }

 private:
  GpuReading read_device(int index, nvmlDevice_t d) {
    GpuReading r;
    GpuResources& g = r.device;
    g.index = index;
    char uuid[96] = {};
    if (api_.uuid && api_.uuid(d, uuid, sizeof uuid) == NVML_SUCCESS) g.uuid = uuid;
    nvmlUtilization_t util{};
    if (api_.utilization && api_.utilization(d, &util) == NVML_SUCCESS) g.util_percent = util.gpu;
    nvmlMemory_t mem{};
    if (api_.memory && api_.memory(d, &mem) == NVML_SUCCESS) {
      g.mem_used_bytes = mem.used;
      g.mem_total_bytes = mem.total;
    }
    unsigned int value = 0;
    if (api_.temperature && api_.temperature(d, NVML_TEMPERATURE_GPU, &value) == NVML_SUCCESS) {
      g.temperature_c = static_cast<int>(value);
    }
    if (api_.power && api_.power(d, &value) == NVML_SUCCESS) g.power_w = value / 1000.0;
    if (api_.clock && api_.clock(d, NVML_CLOCK_SM, &value) == NVML_SUCCESS) g.sm_clock_mhz = static_cast<int>(value);
    unsigned long long bits = 0;
    if (api_.throttle_reasons && api_.throttle_reasons(d, &bits) == NVML_SUCCESS) {
      for (const auto& [bit, name] : kThrottleReasons) {
        if ((bits & bit) != 0) g.throttle_reasons.emplace_back(name);
      }
    }
    unsigned long long ecc = 0;
    if (api_.ecc_errors &&
        api_.ecc_errors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ecc) == NVML_SUCCESS) {
      g.ecc_errors = ecc;
    }
    if (events_ != nullptr) {
      const auto x = xids_.find(d);
      g.xid_errors = x == xids_.end() ? 0 : x->second.first;
      if (x != xids_.end()) g.last_xid = x->second.second;
    }
    add_processes(api_.compute_processes, d, r.processes);
    add_processes(api_.graphics_processes, d, r.processes);
    return r;
  }

  using ProcessList = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, void*);
  void add_processes(ProcessList list, nvmlDevice_t d, std::vector<GpuProcess>& out) const {
    if (list == nullptr || api_.process_info_size == 0) return;
    std::vector<unsigned char> buffer;
    unsigned int count = 16;
    nvmlReturn_t rc = NVML_ERROR_INSUFFICIENT_SIZE;
    for (int attempt = 0; attempt < 3 && rc == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
      count += 8;  // room for processes that start between the calls
      buffer.assign(count * api_.process_info_size, 0);
      rc = list(d, &count, buffer.data());
    }
    if (rc != NVML_SUCCESS) return;
    for (unsigned int i = 0; i < count; ++i) {
      // pid and usedGpuMemory lead every layout (see nvmlProcessInfo_v1_t).
      nvmlProcessInfo_v1_t p{};
      const unsigned char* at = buffer.data() + i * api_.process_info_size;
      std::memcpy(&p.pid, at + offsetof(nvmlProcessInfo_v1_t, pid), sizeof p.pid);
      std::memcpy(&p.usedGpuMemory, at + offsetof(nvmlProcessInfo_v1_t, usedGpuMemory), sizeof p.usedGpuMemory);
      GpuProcess gp;
      gp.pid = static_cast<int>(p.pid);
      if (p.usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) gp.used_bytes = p.usedGpuMemory;
      out.push_back(gp);
    }
  }

  // Xid errors arrive as NVML events, not as a counter: register for them
  // once, then drain what arrived at each read (without waiting).
  void watch_xids() {
    if (!api_.event_set_create || !api_.register_events || !api_.event_set_wait) return;
    if (api_.event_set_create(&events_) != NVML_SUCCESS) {
      events_ = nullptr;
      return;
    }
    bool any = false;
    for (const auto& [index, d] : devices_) any |= api_.register_events(d, nvmlEventTypeXidCriticalError, events_) == NVML_SUCCESS;
    if (!any) {
      if (api_.event_set_free) api_.event_set_free(events_);
      events_ = nullptr;
    }
  }

  void count_xids() {
    if (events_ == nullptr) return;
    for (int i = 0; i < 256; ++i) {  // bounded: a storm of events waits for the next read
      nvmlEventData_t e{};
      if (api_.event_set_wait(events_, &e, 0) != NVML_SUCCESS) return;
      if ((e.eventType & nvmlEventTypeXidCriticalError) == 0) continue;
      auto& [count, last] = xids_[e.device];
      ++count;
      last = static_cast<int>(e.eventData);
    }
  }

  void* library_;
  NvmlApi api_;
  std::vector<std::pair<int, nvmlDevice_t>> devices_;  // NVML index, handle
  nvmlEventSet_t events_ = nullptr;
  std::map<nvmlDevice_t, std::pair<uint64_t, int>> xids_;  // count, last Xid
};

}  // namespace

std::unique_ptr<GpuReader> open_nvml(const std::string& library, std::string& why) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = dlerror();
    why = fmt::format("{} cannot be loaded ({})", library, err != nullptr ? err : "unknown error");
    return nullptr;
  }
  NvmlApi api;
  bind_symbol(lib, api.init, {"nvmlInit_v2", "nvmlInit"});
  bind_symbol(lib, api.shutdown, {"nvmlShutdown"});
  bind_symbol(lib, api.error_string, {"nvmlErrorString"});
  bind_symbol(lib, api.device_count, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  bind_symbol(lib, api.handle_by_index, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  bind_symbol(lib, api.uuid, {"nvmlDeviceGetUUID"});
  bind_symbol(lib, api.utilization, {"nvmlDeviceGetUtilizationRates"});
  bind_symbol(lib, api.memory, {"nvmlDeviceGetMemoryInfo"});
  bind_symbol(lib, api.temperature, {"nvmlDeviceGetTemperature"});
  bind_symbol(lib, api.power, {"nvmlDeviceGetPowerUsage"});
  bind_symbol(lib, api.clock, {"nvmlDeviceGetClockInfo"});
  bind_symbol(lib, api.throttle_reasons,
       {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"});
  bind_symbol(lib, api.ecc_errors, {"nvmlDeviceGetTotalEccErrors"});
  bind_process_lists(lib, api);
  bind_symbol(lib, api.event_set_create, {"nvmlEventSetCreate"});
  bind_symbol(lib, api.event_set_free, {"nvmlEventSetFree"});
  bind_symbol(lib, api.register_events, {"nvmlDeviceRegisterEvents"});
  bind_symbol(lib, api.event_set_wait, {"nvmlEventSetWait_v2", "nvmlEventSetWait"});
  if (!api.init || !api.shutdown || !api.device_count || !api.handle_by_index) {
    why = library + " lacks nvmlInit, nvmlShutdown or the device calls";
    dlclose(lib);
    return nullptr;
  }
  const auto error = [&api](nvmlReturn_t rc) {
    return api.error_string ? std::string(api.error_string(rc)) : fmt::format("NVML error {}", rc);
  };
  if (const nvmlReturn_t rc = api.init(); rc != NVML_SUCCESS) {
    why = fmt::format("NVML did not start: {}", error(rc));
    dlclose(lib);
    return nullptr;
  }
  unsigned int count = 0;
  std::vector<std::pair<int, nvmlDevice_t>> devices;
  if (const nvmlReturn_t rc = api.device_count(&count); rc != NVML_SUCCESS) {
    why = fmt::format("NVML cannot count the GPUs: {}", error(rc));
  }
  for (unsigned int i = 0; i < count; ++i) {
    nvmlDevice_t d = nullptr;
    if (api.handle_by_index(i, &d) == NVML_SUCCESS) devices.emplace_back(static_cast<int>(i), d);
  }
  if (devices.empty()) {
    if (why.empty()) why = "NVML lists no GPU";
    api.shutdown();
    dlclose(lib);
    return nullptr;
  }
  return std::make_unique<NvmlGpuReader>(lib, api, std::move(devices));
}

}  // namespace ddp
