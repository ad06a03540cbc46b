#include "topology/host_resources.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <thread>

namespace ddp {
namespace {

int driver_device_count(const std::string& driver_dir) {
  std::error_code ec;
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(driver_dir, ec)) {
    if (entry.is_directory(ec)) ++count;
  }
  return count;
}

// CUDA stops reading CUDA_VISIBLE_DEVICES at the first invalid entry, so
// "0,1,-1,2" shows two devices and "" or "-1" shows none.
int listed_devices(const std::string& list) {
  int count = 0;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    if (item.empty() || item[0] == '-') break;
    ++count;
  }
  return count;
}

}  // namespace

int visible_cuda_devices(const std::optional<std::string>& cuda_visible_devices, const std::string& driver_dir) {
  const int present = driver_device_count(driver_dir);
  if (!cuda_visible_devices) return present;
  return std::min(present, listed_devices(*cuda_visible_devices));
}

int usable_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace ddp
