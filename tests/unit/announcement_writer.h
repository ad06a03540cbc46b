#pragma once
// Test helpers for the collective announcement file: a writer that lays it
// out as the Python companion does (launcher/python/_ddplaunch_companion/
// announcements.py), a private temporary folder, and the reader opened on it.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "companion/collective_announcements.h"

namespace ddp {

class TempFolder {
 public:
  TempFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "ddp-ann-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : std::string();
  }
  ~TempFolder() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

class AnnouncementWriter {
 public:
  explicit AnnouncementWriter(std::string path, const char* magic = "DDPA", uint32_t version = 3,
                              size_t size = CollectiveAnnouncements::kFileBytes)
      : path_(std::move(path)), size_(size) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0) << path_;
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(size_)), 0);
    void* map = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(map, MAP_FAILED);
    data_ = static_cast<unsigned char*>(map);
    if (size_ >= 8) {
      std::memcpy(data_, magic, 4);
      std::memcpy(data_ + 4, &version, 4);
    }
  }
  ~AnnouncementWriter() { munmap(data_, size_); }
  const std::string& path() const { return path_; }

  /// The next announcement: entry first, then the count. group: empty for the default one.
  void write(uint64_t sequence, const std::string& op, int64_t bytes, const std::string& dtype, SteadyTime started,
             const std::string& group = "") {
    const uint64_t n = ++count_;
    unsigned char* e = data_ + CollectiveAnnouncements::kHeaderBytes +
                       ((n - 1) % CollectiveAnnouncements::kSlots) * CollectiveAnnouncements::kEntryBytes;
    std::memset(e, 0, CollectiveAnnouncements::kEntryBytes);
    const auto stamp = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(started.time_since_epoch()).count());
    std::memcpy(e, &n, 8);
    std::memcpy(e + 8, &sequence, 8);
    std::memcpy(e + 16, &bytes, 8);
    std::memcpy(e + 24, &stamp, 8);
    std::memcpy(e + 32, op.data(), std::min<size_t>(op.size(), 24));
    std::memcpy(e + 56, dtype.data(), std::min<size_t>(dtype.size(), 16));
    std::memcpy(e + 72, group.data(), std::min<size_t>(group.size(), 48));
    std::memcpy(data_ + 8, &n, 8);
  }
  /// Marks announcement n's call as returned, as the companion does.
  void returned(uint64_t n) {
    const uint64_t marked = n | CollectiveAnnouncements::kReturnedBit;
    std::memcpy(data_ + CollectiveAnnouncements::kHeaderBytes +
                    ((n - 1) % CollectiveAnnouncements::kSlots) * CollectiveAnnouncements::kEntryBytes,
                &marked, 8);
  }
  /// Overwrites entry n's own number, as a write in progress would leave it.
  void tear(uint64_t n) {
    const uint64_t other = n + 1000;
    std::memcpy(data_ + CollectiveAnnouncements::kHeaderBytes +
                    ((n - 1) % CollectiveAnnouncements::kSlots) * CollectiveAnnouncements::kEntryBytes,
                &other, 8);
  }

 private:
  std::string path_;
  size_t size_;
  unsigned char* data_ = nullptr;
  uint64_t count_ = 0;
};

inline std::shared_ptr<const CollectiveAnnouncements> open_announcements(const std::string& path,
                                                                         const std::string& folder) {
  std::string error;
  auto a = CollectiveAnnouncements::open(path, folder, &error);
  EXPECT_TRUE(a) << error;
  return a;
}

/// A writer's file in a private folder, already mapped by a reader (which
/// removed its name): what most tests start from.
struct MappedAnnouncements {
  TempFolder folder;
  AnnouncementWriter writer{folder.file("r.ann")};
  std::shared_ptr<const CollectiveAnnouncements> reader = open_announcements(writer.path(), folder.path());
};

}  // namespace ddp
