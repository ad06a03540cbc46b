// A stand-in for libnvidia-ml.so.1, built as a shared library for
// nvml_fake_metrics_test.cpp: the real NVML reader (metrics/nvml_gpu_reader.cpp)
// loads it with dlopen() like the driver's, so its symbol binding, process
// list layout (the _v2 one here) and Xid events are tested without a GPU.
// Two devices: 0 runs the calling process (1 GiB) and reports Xid 79 once;
// 1 runs nothing.
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace {
struct Device {
  int index;
};
Device devices[2] = {{0}, {1}};
bool xid_pending = true;
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct EventData {
  void* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
int index_of(void* d) { return static_cast<Device*>(d)->index; }
}  // namespace

extern "C" {
int nvmlInit_v2() { return 0; }
int nvmlShutdown() { return 0; }
const char* nvmlErrorString(int) { return "fake error"; }
int nvmlDeviceGetCount_v2(unsigned int* n) {
  *n = 2;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int i, void** d) {
  if (i >= 2) return 2;
  *d = &devices[i];
  return 0;
}
int nvmlDeviceGetUUID(void* d, char* out, unsigned int len) {
  std::snprintf(out, len, "GPU-fake-%d", index_of(d));
  return 0;
}
int nvmlDeviceGetUtilizationRates(void* d, unsigned int* util) {
  util[0] = index_of(d) == 0 ? 87 : 0;  // gpu, memory
  util[1] = 10;
  return 0;
}
int nvmlDeviceGetMemoryInfo(void*, unsigned long long* mem) {
  mem[0] = 80ull << 30;  // total, free, used
  mem[1] = 70ull << 30;
  mem[2] = 10ull << 30;
  return 0;
}
int nvmlDeviceGetTemperature(void*, int, unsigned int* t) {
  *t = 64;
  return 0;
}
int nvmlDeviceGetPowerUsage(void*, unsigned int* mw) {
  *mw = 312500;
  return 0;
}
int nvmlDeviceGetClockInfo(void*, int, unsigned int* mhz) {
  *mhz = 1980;
  return 0;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void*, unsigned long long* bits) {
  *bits = 0x4 | 0x40;  // sw_power_cap, hw_thermal_slowdown
  return 0;
}
int nvmlDeviceGetTotalEccErrors(void*, int, int, unsigned long long* n) {
  *n = 2;
  return 0;
}
int nvmlDeviceGetComputeRunningProcesses_v2(void* d, unsigned int* count, ProcessInfoV2* infos) {
  const unsigned int have = index_of(d) == 0 ? 1 : 0;
  if (*count < have) {
    *count = have;
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  *count = have;
  if (have == 1) {
    std::memset(infos, 0xff, sizeof *infos);
    infos[0].pid = static_cast<unsigned int>(getpid());
    infos[0].usedGpuMemory = 1ull << 30;
  }
  return 0;
}
int nvmlEventSetCreate(void** set) {
  static int the_set;
  *set = &the_set;
  return 0;
}
int nvmlEventSetFree(void*) { return 0; }
int nvmlDeviceRegisterEvents(void*, unsigned long long, void*) { return 0; }
int nvmlEventSetWait_v2(void*, EventData* e, unsigned int) {
  if (!xid_pending) return 10;  // NVML_ERROR_TIMEOUT
  xid_pending = false;
  std::memset(e, 0, sizeof *e);
  e->device = &devices[0];
  e->eventType = 0x8;
  e->eventData = 79;
  return 0;
}
}
