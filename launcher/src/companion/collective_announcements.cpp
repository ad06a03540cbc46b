#include "companion/collective_announcements.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>

namespace ddp {
namespace {

constexpr char kMagic[4] = {'D', 'D', 'P', 'A'};
constexpr uint32_t kVersion = 3;
constexpr size_t kOpBytes = 24;
constexpr size_t kDtypeBytes = 16;
constexpr size_t kGroupBytes = 48;
static_assert(32 + kOpBytes + kDtypeBytes + kGroupBytes == CollectiveAnnouncements::kEntryBytes);

uint64_t load_u64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The count is the companion's last store for an entry: read it with acquire
// order, so the entry's bytes read after it are at least as new.
uint64_t load_count(const unsigned char* data) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(data + 8), __ATOMIC_ACQUIRE);
}

std::string name_field(const unsigned char* p, size_t size) {
  const auto* begin = reinterpret_cast<const char*>(p);
  std::string s(begin, strnlen(begin, size));
  // Names are letters, digits and underscores: anything else is a torn or foreign write.
  const bool plain = std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
  return plain ? s : std::string();
}

}  // namespace

std::unique_ptr<CollectiveAnnouncements> CollectiveAnnouncements::open(const std::string& path,
                                                                       const std::string& folder, std::string* error) {
  const std::filesystem::path p(path);
  if (p.parent_path() != std::filesystem::path(folder) || p.filename().string().find("..") != std::string::npos) {
    *error = "not in the agent's runtime folder";
    return nullptr;
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    *error = std::strerror(errno);
    return nullptr;
  }
  struct stat st {};
  void* map = MAP_FAILED;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid()) {
    *error = "not a regular file of this user";
  } else if (static_cast<size_t>(st.st_size) < kFileBytes) {
    *error = "too small";
  } else {
    map = mmap(nullptr, kFileBytes, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) *error = std::strerror(errno);
  }
  close(fd);
  if (map == MAP_FAILED) return nullptr;
  unlink(path.c_str());  // the mapping keeps it; no name is left behind
  const auto* data = static_cast<const unsigned char*>(map);
  uint32_t version = 0;
  std::memcpy(&version, data + 4, sizeof version);
  if (std::memcmp(data, kMagic, sizeof kMagic) != 0 || version != kVersion) {
    munmap(map, kFileBytes);
    *error = "not an announcement file of this version";
    return nullptr;
  }
  return std::unique_ptr<CollectiveAnnouncements>(new CollectiveAnnouncements(data));
}

CollectiveAnnouncements::~CollectiveAnnouncements() {
  munmap(const_cast<unsigned char*>(data_), kFileBytes);
}

uint64_t CollectiveAnnouncements::count() const { return load_count(data_); }

std::vector<AnnouncedCollective> CollectiveAnnouncements::since(uint64_t after, SteadyTime now) const {
  const uint64_t count = load_count(data_);
  std::vector<AnnouncedCollective> out;
  if (count <= after) return out;
  const uint64_t first = std::max<uint64_t>(after + 1, count > kSlots ? count - kSlots + 1 : 1);
  for (uint64_t n = first; n <= count; ++n) {
    const unsigned char* e = data_ + kHeaderBytes + ((n - 1) % kSlots) * kEntryBytes;
    unsigned char copy[kEntryBytes];
    std::memcpy(copy, e, kEntryBytes);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    // Overwritten while we copied it (the companion went round the ring)?
    const uint64_t own = load_u64(copy);
    if ((own & ~kReturnedBit) != n || load_count(data_) >= n + kSlots) continue;
    AnnouncedCollective c;
    c.sequence = load_u64(copy + 8);
    const auto bytes = static_cast<int64_t>(load_u64(copy + 16));
    c.bytes = std::max<int64_t>(bytes, 0);
    const uint64_t stamp = load_u64(copy + 24);
    const SteadyTime started = stamp <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                                   ? SteadyTime(std::chrono::nanoseconds(static_cast<int64_t>(stamp)))
                                   : now;
    c.age = started < now ? now - started : Duration::zero();
    c.op = name_field(copy + 32, kOpBytes);
    c.dtype = name_field(copy + 32 + kOpBytes, kDtypeBytes);
    const unsigned char* group = copy + 32 + kOpBytes + kDtypeBytes;
    c.group = name_field(group, kGroupBytes);
    c.state = (own & kReturnedBit) != 0 ? "completed" : "started";
    // A group name we cannot read must not pass for the default group.
    if (c.sequence == 0 || c.op.empty() || (c.group.empty() && group[0] != 0)) continue;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace ddp
