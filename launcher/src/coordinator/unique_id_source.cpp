#include "coordinator/unique_id_source.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>
#include <random>

namespace ddp {
namespace {

class RandomIdSource final : public UniqueIdSource {
 public:
  std::string create_id() override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string id(kUniqueIdBytes, '\0');
    for (char& c : id) c = static_cast<char>(engine_() & 0xff);
    return id;
  }
  std::string describe() const override { return "random bytes (NCCL not found)"; }

 private:
  std::mutex mutex_;
  std::mt19937_64 engine_{std::random_device{}()};
};

// Declared here rather than taken from nccl.h: the launcher must not need
// NCCL's headers to build. ncclUniqueId is { char internal[128]; } in every
// NCCL release, and ncclResult_t an int-sized enum.
struct NcclUniqueIdLayout {
  char internal[kUniqueIdBytes];
};
using GetUniqueIdFn = int (*)(NcclUniqueIdLayout*);
using GetVersionFn = int (*)(int*);

// Loads NCCL on the first ID, not at start: libnccl is large, and a
// process with it mapped forks its workers measurably slower.
class NcclIdSource final : public UniqueIdSource {
 public:
  std::string create_id() override {
    std::lock_guard<std::mutex> lock(mutex_);
    load();
    if (get_id_ == nullptr) return fallback_.create_id();
    NcclUniqueIdLayout id{};
    if (const int rc = get_id_(&id); rc != 0) throw std::runtime_error(fmt::format("ncclGetUniqueId failed: {}", rc));
    return std::string(id.internal, sizeof id.internal);
  }
  std::string describe() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!loaded_) return "ncclGetUniqueId when libnccl.so.2 loads, else random bytes";
    if (get_id_ == nullptr) return fallback_.describe();
    return fmt::format("ncclGetUniqueId (NCCL {}.{}.{})", version_ / 10000, (version_ / 100) % 100, version_ % 100);
  }

 private:
  void load() {
    if (loaded_) return;
    loaded_ = true;
    // Never dlclose'd: NCCL's bootstrap threads run from the library.
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    get_id_ = reinterpret_cast<GetUniqueIdFn>(dlsym(lib, "ncclGetUniqueId"));
    if (auto get_version = reinterpret_cast<GetVersionFn>(dlsym(lib, "ncclGetVersion"))) get_version(&version_);
  }

  mutable std::mutex mutex_;
  bool loaded_ = false;
  GetUniqueIdFn get_id_ = nullptr;
  int version_ = 0;
  RandomIdSource fallback_;
};

}  // namespace

std::unique_ptr<UniqueIdSource> make_random_id_source() { return std::make_unique<RandomIdSource>(); }

std::unique_ptr<UniqueIdSource> make_unique_id_source() { return std::make_unique<NcclIdSource>(); }

}  // namespace ddp
