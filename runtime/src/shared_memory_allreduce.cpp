#include "shared_memory_allreduce.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <vector>

namespace ddp {
namespace {

constexpr uint64_t kMagic = 0x4444502d53484d31ULL;  // "DDP-SHM1"
constexpr size_t kPage = 4096;
// The whole segment stays within this budget (containers often give /dev/shm
// only 64 MiB); the slot (chunk) size follows from it and the group size.
constexpr size_t kSegmentBudget = 32u << 20;
constexpr size_t kMaxSlot = 4u << 20;
constexpr size_t kMinSlot = 64u << 10;
// Up to this many ranks each rank reduces whole chunks itself (reading every
// slot); beyond it each reduces 1/n and copies the result out, so the memory
// each rank reads stays bounded.
constexpr int kWholeChunkMaxRanks = 4;

struct ShmHeader {
  uint64_t magic;
  uint32_t size;
  uint64_t slot_bytes;
  ShmBarrierState barrier;
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }
size_t header_bytes() { return round_up(sizeof(ShmHeader), kPage); }
size_t segment_bytes(int size, size_t slot) { return header_bytes() + 2 * static_cast<size_t>(size + 1) * slot; }

size_t slot_bytes_for(int size) {
  const size_t slot = kSegmentBudget / (2 * static_cast<size_t>(size + 1));
  return std::clamp(slot, kMinSlot, kMaxSlot) / kPage * kPage;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Ranks that agree on this share /dev/shm and a kernel.
std::string host_identity() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char ns[128] = {};
  const ssize_t n = readlink("/proc/self/ns/mnt", ns, sizeof(ns) - 1);
  return std::string(host) + "|" + read_first_line("/proc/sys/kernel/random/boot_id") + "|" +
         (n > 0 ? std::string(ns, static_cast<size_t>(n)) : std::string("?"));
}

std::string errno_text(const std::string& what) { return what + ": " + std::strerror(errno); }

// Creates, sizes, reserves and maps the segment; returns nullptr and sets why.
void* create_segment(const std::string& name, size_t length, std::string& why) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    why = errno_text("shm_open " + name);
    return nullptr;
  }
  void* base = MAP_FAILED;
  if (ftruncate(fd, static_cast<off_t>(length)) != 0) {
    why = errno_text("ftruncate " + name);
  } else if (const int rc = posix_fallocate(fd, 0, static_cast<off_t>(length)); rc != 0) {
    why = "reserving " + std::to_string(length >> 20) + " MiB in /dev/shm: " + std::strerror(rc);
  } else {
    base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) why = errno_text("mmap " + name);
  }
  close(fd);
  if (base == MAP_FAILED) {
    shm_unlink(name.c_str());
    return nullptr;
  }
  return base;
}

void* open_segment(const std::string& name, size_t length, std::string& why) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    why = errno_text("shm_open " + name);
    return nullptr;
  }
  struct stat st {};
  void* base = MAP_FAILED;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != length) {
    why = "segment " + name + " has an unexpected size";
  } else {
    base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) why = errno_text("mmap " + name);
  }
  close(fd);
  return base == MAP_FAILED ? nullptr : base;
}

// out[i] = in[0][i] + in[1][i] + ... (then / n): simple loops the compiler
// vectorizes (this file is built with -O3).
template <typename T>
void reduce_slice(T* out, const std::vector<const T*>& in, size_t count, bool average, int n) {
  const T* a = in[0];
  if (in.size() == 1) {
    std::memcpy(out, a, count * sizeof(T));
  } else {
    const T* b = in[1];
    for (size_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
  }
  for (size_t k = 2; k < in.size(); ++k) {
    const T* c = in[k];
    for (size_t i = 0; i < count; ++i) out[i] += c[i];
  }
  if (average) {
    const T divisor = static_cast<T>(n);
    for (size_t i = 0; i < count; ++i) out[i] /= divisor;
  }
}

size_t element_size(ShmDtype t) {
  switch (t) {
    case ShmDtype::kFloat64: case ShmDtype::kInt64: return 8;
    case ShmDtype::kFloat32: case ShmDtype::kInt32: return 4;
    case ShmDtype::kInt8: case ShmDtype::kUint8: return 1;
  }
  return 1;
}

template <typename T>
void reduce_typed(unsigned char* out, const std::vector<const unsigned char*>& in, size_t count, bool average, int n) {
  std::vector<const T*> typed;
  typed.reserve(in.size());
  for (const unsigned char* p : in) typed.push_back(reinterpret_cast<const T*>(p));
  reduce_slice(reinterpret_cast<T*>(out), typed, count, average, n);
}

void reduce(ShmDtype t, unsigned char* out, const std::vector<const unsigned char*>& in, size_t count, bool average,
            int n) {
  switch (t) {
    case ShmDtype::kFloat32: reduce_typed<float>(out, in, count, average, n); break;
    case ShmDtype::kFloat64: reduce_typed<double>(out, in, count, average, n); break;
    case ShmDtype::kInt32: reduce_typed<int32_t>(out, in, count, average, n); break;
    case ShmDtype::kInt64: reduce_typed<int64_t>(out, in, count, average, n); break;
    case ShmDtype::kInt8: reduce_typed<int8_t>(out, in, count, average, n); break;
    case ShmDtype::kUint8: reduce_typed<uint8_t>(out, in, count, average, n); break;
  }
}

std::string random_name() {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/ddp-shm-%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
  return buf;
}

}  // namespace

std::unique_ptr<SharedMemoryAllreduce> SharedMemoryAllreduce::connect(Store& store, int rank, int size,
                                                                       std::chrono::milliseconds timeout,
                                                                       std::string* reason) {
  auto fail = [&](std::string why) -> std::unique_ptr<SharedMemoryAllreduce> {
    if (reason) *reason = std::move(why);
    return nullptr;
  };
  if (size < 2) return fail("a single rank has nothing to share");
  if (size > kShmMaxRanks) return fail("more than " + std::to_string(kShmMaxRanks) + " ranks");
  const Duration wait = std::chrono::duration_cast<Duration>(timeout);

  // 1. One host? Every rank reads every identity, so all decide alike.
  const std::string me = host_identity();
  store.set("shm/host/" + std::to_string(rank), me);
  for (int r = 0; r < size; ++r) {
    if (store.wait_get("shm/host/" + std::to_string(r), wait) != me) {
      // Still take part in nothing else: no rank goes on to step 2.
      return fail("ranks are on more than one host");
    }
  }

  // 2. Rank 0 creates the segment; the others map it and report.
  const size_t slot = slot_bytes_for(size);
  const size_t length = segment_bytes(size, slot);
  void* base = nullptr;
  std::string why;
  std::string name;
  if (rank == 0) {
    name = random_name();
    base = create_segment(name, length, why);
    if (base) {
      auto* header = new (base) ShmHeader{};
      header->size = static_cast<uint32_t>(size);
      header->slot_bytes = slot;
      for (auto& pid : header->barrier.pids) pid.store(0, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
      header->magic = kMagic;
    }
    store.set("shm/name", base ? name : std::string());
  } else {
    name = store.wait_get("shm/name", wait);
    if (name.empty()) {
      why = "rank 0 could not create the segment";
    } else {
      base = open_segment(name, length, why);
      if (base && static_cast<ShmHeader*>(base)->magic != kMagic) {
        munmap(base, length);
        base = nullptr;
        why = "segment " + name + " is not ours";
      }
    }
    store.set("shm/mapped/" + std::to_string(rank), base ? "1" : "0");
  }

  // 3. All ranks learn whether every rank mapped it; rank 0 then unlinks it.
  bool everyone = !name.empty();
  for (int r = 1; r < size && everyone; ++r) {
    everyone = store.wait_get("shm/mapped/" + std::to_string(r), wait) == "1";
  }
  if (rank == 0 && !name.empty()) shm_unlink(name.c_str());
  if (!everyone || !base) {
    if (base) munmap(base, length);
    return fail(why.empty() ? "a peer could not map the segment" : why);
  }
  return std::unique_ptr<SharedMemoryAllreduce>(new SharedMemoryAllreduce(base, length, rank, size, slot, timeout));
}

SharedMemoryAllreduce::SharedMemoryAllreduce(void* base, size_t length, int rank, int size, size_t slot_bytes,
                                             std::chrono::milliseconds timeout)
    : base_(base),
      length_(length),
      rank_(rank),
      size_(size),
      slot_bytes_(slot_bytes),
      timeout_(timeout),
      barrier_(&static_cast<ShmHeader*>(base)->barrier, rank, size) {}

SharedMemoryAllreduce::~SharedMemoryAllreduce() {
  // Peers waiting for this rank learn at once that it will not come.
  barrier_.leave();
  munmap(base_, length_);
}

unsigned char* SharedMemoryAllreduce::slot(int set, int rank) const {
  return static_cast<unsigned char*>(base_) + header_bytes() +
         (static_cast<size_t>(set) * static_cast<size_t>(size_ + 1) + static_cast<size_t>(rank)) * slot_bytes_;
}

unsigned char* SharedMemoryAllreduce::result(int set) const { return slot(set, size_); }

void SharedMemoryAllreduce::all_reduce(void* data, size_t count, ShmDtype dtype, bool average) {
  const size_t elem = element_size(dtype);
  const size_t per_chunk = slot_bytes_ / elem;
  auto* bytes = static_cast<unsigned char*>(data);
  std::vector<const unsigned char*> inputs(static_cast<size_t>(size_));
  try {
    for (size_t done = 0; done < count;) {
      const size_t n = std::min(per_chunk, count - done);
      const int set = parity_;
      parity_ ^= 1;
      std::memcpy(slot(set, rank_), bytes + done * elem, n * elem);
      barrier_.arrive_and_wait(timeout_);
      if (size_ <= kWholeChunkMaxRanks) {
        // Every rank sums the whole chunk into its own tensor: one barrier,
        // and fewer passes over memory than slice + copy-out for few ranks.
        for (int r = 0; r < size_; ++r) inputs[static_cast<size_t>(r)] = slot(set, r);
        reduce(dtype, bytes + done * elem, inputs, n, average, size_);
        done += n;
        continue;
      }
      // This rank's slice, cut at 16-element boundaries (whole cache lines for
      // 4-byte types) so two ranks never write the same line.
      const size_t step = (n + static_cast<size_t>(size_) - 1) / static_cast<size_t>(size_);
      const size_t width = (step + 15) / 16 * 16;
      const size_t lo = std::min(n, width * static_cast<size_t>(rank_));
      const size_t hi = std::min(n, lo + width);
      if (hi > lo) {
        for (int r = 0; r < size_; ++r) inputs[static_cast<size_t>(r)] = slot(set, r) + lo * elem;
        reduce(dtype, result(set) + lo * elem, inputs, hi - lo, average, size_);
      }
      barrier_.arrive_and_wait(timeout_);
      std::memcpy(bytes + done * elem, result(set), n * elem);
      done += n;
    }
  } catch (...) {
    barrier_.abort();
    throw;
  }
}

}  // namespace ddp
