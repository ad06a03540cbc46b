#include "shared_memory_allreduce.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <new>
#include <random>
#include <utility>
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

// register_buffer: each rank's new segment name, then whether it mapped all
// of its peers'.
constexpr size_t kNameBytes = 64;
struct ShmRegistration {
  char name[kNameBytes];
  uint32_t mapped;
};

// What a rank's all_reduce is about to reduce, published before the first
// barrier so every rank takes the same path. buffer_id 0: not a registered
// buffer. Two sets alternate by op, as a rank can be at most one op ahead.
struct ShmOp {
  uint64_t buffer_id;
  uint64_t offset;
  uint64_t count;
  uint32_t dtype;
};

struct ShmHeader {
  uint64_t magic;
  uint32_t size;
  uint64_t slot_bytes;
  ShmBarrierState barrier;
  ShmRegistration registration[kShmMaxRanks];
  ShmOp ops[2][kShmMaxRanks];
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

// The same sums as reduce_slice, in the same order (so the same bits), but
// block by block through a small buffer: out may be one of the inputs. Only
// the registered path needs that; the slot path keeps the straight loops,
// which measured about 10% faster at 16-64 MiB.
template <typename T>
void reduce_slice_blocked(T* out, const std::vector<const T*>& in, size_t count, bool average, int n) {
  constexpr size_t kBlock = 1024;
  T acc[kBlock];
  const T divisor = static_cast<T>(n);
  for (size_t begin = 0; begin < count; begin += kBlock) {
    const size_t m = std::min(kBlock, count - begin);
    const T* a = in[0] + begin;
    if (in.size() == 1) {
      std::memcpy(acc, a, m * sizeof(T));
    } else {
      const T* b = in[1] + begin;
      for (size_t i = 0; i < m; ++i) acc[i] = a[i] + b[i];
    }
    for (size_t k = 2; k < in.size(); ++k) {
      const T* c = in[k] + begin;
      for (size_t i = 0; i < m; ++i) acc[i] += c[i];
    }
    if (average) {
      for (size_t i = 0; i < m; ++i) acc[i] /= divisor;
    }
    std::memcpy(out + begin, acc, m * sizeof(T));
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
void reduce_typed(unsigned char* out, const std::vector<const unsigned char*>& in, size_t count, bool average, int n,
                  bool out_may_alias) {
  std::vector<const T*> typed;
  typed.reserve(in.size());
  for (const unsigned char* p : in) typed.push_back(reinterpret_cast<const T*>(p));
  if (out_may_alias) {
    reduce_slice_blocked(reinterpret_cast<T*>(out), typed, count, average, n);
  } else {
    reduce_slice(reinterpret_cast<T*>(out), typed, count, average, n);
  }
}

// out = in[0] + in[1] + ... (/ n when average). out_may_alias: out is one of
// the inputs (the registered path reduces a rank's slice in place).
void reduce(ShmDtype t, unsigned char* out, const std::vector<const unsigned char*>& in, size_t count, bool average,
            int n, bool out_may_alias = false) {
  switch (t) {
    case ShmDtype::kFloat32: reduce_typed<float>(out, in, count, average, n, out_may_alias); break;
    case ShmDtype::kFloat64: reduce_typed<double>(out, in, count, average, n, out_may_alias); break;
    case ShmDtype::kInt32: reduce_typed<int32_t>(out, in, count, average, n, out_may_alias); break;
    case ShmDtype::kInt64: reduce_typed<int64_t>(out, in, count, average, n, out_may_alias); break;
    case ShmDtype::kInt8: reduce_typed<int8_t>(out, in, count, average, n, out_may_alias); break;
    case ShmDtype::kUint8: reduce_typed<uint8_t>(out, in, count, average, n, out_may_alias); break;
  }
}

// Rank r's share of count elements, cut at 16-element boundaries (whole cache
// lines for 4-byte types) so two ranks never write the same line.
std::pair<size_t, size_t> slice_of(int r, size_t count, int size) {
  const size_t step = (count + static_cast<size_t>(size) - 1) / static_cast<size_t>(size);
  const size_t width = (step + 15) / 16 * 16;
  const size_t lo = std::min(count, width * static_cast<size_t>(r));
  return {lo, std::min(count, lo + width)};
}

std::string random_name() {
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof(buf), "/ddp-shm-%d-%08x%08x", static_cast<int>(getpid()), rd(), rd());
  return buf;
}

}  // namespace

void sum_in_rank_order(ShmDtype dtype, void* out, const std::vector<const void*>& in, size_t count, bool average,
                       int n) {
  std::vector<const unsigned char*> bytes;
  bytes.reserve(in.size());
  for (const void* p : in) bytes.push_back(static_cast<const unsigned char*>(p));
  reduce(dtype, static_cast<unsigned char*>(out), bytes, count, average, n);
}

std::unique_ptr<SharedMemoryAllreduce> SharedMemoryAllreduce::connect(Store& store, int rank, int size,
                                                                       std::chrono::milliseconds timeout,
                                                                       std::string* reason, bool* on_one_host) {
  if (on_one_host) *on_one_host = false;
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
  if (on_one_host) *on_one_host = true;

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

struct SharedMemoryAllreduce::Registered {
  uint64_t id = 0;
  size_t length = 0;
  std::vector<void*> bases;  // by rank: this rank's own buffer and its mappings of the peers'
  int rank = 0;
  ~Registered() {
    for (void* b : bases) {
      if (b) munmap(b, length);
    }
  }
  unsigned char* own() const { return static_cast<unsigned char*>(bases[static_cast<size_t>(rank)]); }
};

std::shared_ptr<void> SharedMemoryAllreduce::register_buffer(size_t bytes) {
  auto* header = static_cast<ShmHeader*>(base_);
  auto reg = std::make_shared<Registered>();
  reg->id = next_buffer_id_++;
  reg->length = round_up(std::max<size_t>(bytes, 1), kPage);
  reg->rank = rank_;
  reg->bases.assign(static_cast<size_t>(size_), nullptr);
  std::string why;
  const std::string name = random_name();
  // Buckets are optional here, so they never take more than half of what
  // /dev/shm has left: other users of it (data loader workers) come first.
  struct statvfs fs {};
  const bool room = statvfs("/dev/shm", &fs) == 0 &&
                    reg->length <= static_cast<size_t>(fs.f_bavail) * static_cast<size_t>(fs.f_frsize) / 2;
  void* own = room ? create_segment(name, reg->length, why) : nullptr;  // zero-filled, reserved
  reg->bases[static_cast<size_t>(rank_)] = own;
  ShmRegistration& mine = header->registration[rank_];
  std::memset(mine.name, 0, kNameBytes);
  if (own) std::memcpy(mine.name, name.data(), std::min(name.size(), kNameBytes - 1));
  bool everyone = false;
  try {
    barrier_.arrive_and_wait(timeout_);  // every name (or its absence) is published
    bool ok = own != nullptr;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const char* peer = header->registration[r].name;
      const std::string peer_name(peer, strnlen(peer, kNameBytes));
      void* mapped = peer_name.empty() ? nullptr : open_segment(peer_name, reg->length, why);
      reg->bases[static_cast<size_t>(r)] = mapped;
      ok = ok && mapped != nullptr;
    }
    mine.mapped = ok ? 1 : 0;
    barrier_.arrive_and_wait(timeout_);  // every rank has mapped what it could
    everyone = true;
    for (int r = 0; r < size_; ++r) everyone = everyone && header->registration[r].mapped == 1;
  } catch (...) {
    if (own) shm_unlink(name.c_str());
    barrier_.abort();
    throw;
  }
  if (own) shm_unlink(name.c_str());  // mapped by all who will: nothing stays in /dev/shm
  if (!everyone) return nullptr;      // reg unmaps what this rank mapped
  registered_.erase(std::remove_if(registered_.begin(), registered_.end(),
                                   [](const std::weak_ptr<Registered>& w) { return w.expired(); }),
                    registered_.end());
  registered_.push_back(reg);
  return std::shared_ptr<void>(reg, own);
}

std::shared_ptr<SharedMemoryAllreduce::Registered> SharedMemoryAllreduce::find_registered(const void* data,
                                                                                        size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (const auto& weak : registered_) {
    auto reg = weak.lock();
    if (reg && p >= reg->own() && p + bytes <= reg->own() + reg->length) return reg;
  }
  return nullptr;
}

void SharedMemoryAllreduce::all_reduce(void* data, size_t count, ShmDtype dtype, bool average) {
  if (count == 0) return;
  auto* header = static_cast<ShmHeader*>(base_);
  auto* bytes = static_cast<unsigned char*>(data);
  const size_t elem = element_size(dtype);
  const int ops = op_parity_;
  op_parity_ ^= 1;
  try {
    const std::shared_ptr<Registered> reg = find_registered(data, count * elem);
    ShmOp& mine = header->ops[ops][rank_];
    mine.buffer_id = reg ? reg->id : 0;
    mine.offset = reg ? static_cast<uint64_t>(bytes - reg->own()) : 0;
    mine.count = count;
    mine.dtype = static_cast<uint32_t>(dtype);
    // Unregistered data goes through the slots: its first chunk is copied in
    // now, so the barrier below is also that chunk's.
    if (!reg) std::memcpy(slot(parity_, rank_), bytes, std::min(slot_bytes_ / elem, count) * elem);
    barrier_.arrive_and_wait(timeout_);

    // Every rank reads every descriptor, so all take the same path.
    bool same_buffer = true;
    bool none_registered = true;
    const ShmOp& first = header->ops[ops][0];
    for (int r = 0; r < size_; ++r) {
      const ShmOp& o = header->ops[ops][r];
      none_registered = none_registered && o.buffer_id == 0;
      same_buffer = same_buffer && o.buffer_id != 0 && o.buffer_id == first.buffer_id && o.offset == first.offset &&
                    o.count == first.count && o.dtype == first.dtype;
    }
    if (same_buffer) {
      reduce_registered(*reg, static_cast<size_t>(first.offset), count, dtype, average);
      ++in_place_ops_;
    } else {
      reduce_through_slots(bytes, count, dtype, average, /*first_chunk_in=*/none_registered);
    }
  } catch (...) {
    barrier_.abort();
    throw;
  }
}

void SharedMemoryAllreduce::reduce_registered(const Registered& buffer, size_t offset, size_t count, ShmDtype dtype,
                                              bool average) {
  const size_t elem = element_size(dtype);
  auto at = [&](int r, size_t element) {
    return static_cast<unsigned char*>(buffer.bases[static_cast<size_t>(r)]) + offset + element * elem;
  };
  // 1. This rank's slice: the sum of every rank's, in rank order, in place.
  const auto [lo, hi] = slice_of(rank_, count, size_);
  if (hi > lo) {
    std::vector<const unsigned char*> inputs(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) inputs[static_cast<size_t>(r)] = at(r, lo);
    reduce(dtype, at(rank_, lo), inputs, hi - lo, average, size_, /*out_may_alias=*/true);
  }
  barrier_.arrive_and_wait(timeout_);
  // 2. The other slices, from the ranks that summed them.
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const auto [qlo, qhi] = slice_of(q, count, size_);
    if (qhi > qlo) std::memcpy(at(rank_, qlo), at(q, qlo), (qhi - qlo) * elem);
  }
  // Nobody may touch its buffer again until every peer has copied from it.
  barrier_.arrive_and_wait(timeout_);
}

void SharedMemoryAllreduce::reduce_through_slots(unsigned char* bytes, size_t count, ShmDtype dtype, bool average,
                                                 bool first_chunk_in) {
  const size_t elem = element_size(dtype);
  const size_t per_chunk = slot_bytes_ / elem;
  std::vector<const unsigned char*> inputs(static_cast<size_t>(size_));
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(per_chunk, count - done);
    const int set = parity_;
    parity_ ^= 1;
    if (!(first_chunk_in && done == 0)) {
      std::memcpy(slot(set, rank_), bytes + done * elem, n * elem);
      barrier_.arrive_and_wait(timeout_);
    }
    if (size_ <= kWholeChunkMaxRanks) {
      // Every rank sums the whole chunk into its own tensor: one barrier,
      // and fewer passes over memory than slice + copy-out for few ranks.
      for (int r = 0; r < size_; ++r) inputs[static_cast<size_t>(r)] = slot(set, r);
      reduce(dtype, bytes + done * elem, inputs, n, average, size_);
      done += n;
      continue;
    }
    const auto [lo, hi] = slice_of(rank_, n, size_);
    if (hi > lo) {
      for (int r = 0; r < size_; ++r) inputs[static_cast<size_t>(r)] = slot(set, r) + lo * elem;
      reduce(dtype, result(set) + lo * elem, inputs, hi - lo, average, size_);
    }
    barrier_.arrive_and_wait(timeout_);
    std::memcpy(bytes + done * elem, result(set), n * elem);
    done += n;
  }
}

}  // namespace ddp
