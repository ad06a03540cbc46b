#pragma once
// CollectiveAnnouncements: the Python companion's note of each collective a
// rank starts, written into a small shared file that this agent maps. A
// socket message per collective would cost the rank a system call and a
// wake-up of the agent at every collective (tens of microseconds on a busy
// machine); a store into shared memory costs it about a microsecond. And
// what is in the mapping outlives the process: a rank that aborts inside a
// mismatched collective has still said which one it entered.
//
// The file (little-endian, written only by the companion, layout version 3):
//   header, 16 bytes:  "DDPA" | u32 version | u64 count (announcements so far)
//   kSlots entries of 120 bytes each, entry n (1-based) at slot (n-1) % kSlots:
//     u64 n | u64 sequence | i64 bytes | u64 started (CLOCK_MONOTONIC ns)
//     | char op[24] | char dtype[16] | char group[48]   (NUL-padded names)
//   n's top bit (kReturnedBit) is set once the synchronous call returned:
//   the rank is no longer in that collective (without it, a rank announcing
//   a collective each step would read as waiting in one after every
//   heartbeat, whatever it does most of its time).
// group is empty for the default group; else the process group's name (the
// sequence then counts that group's collectives, SubgroupProgress).
// The companion writes an entry, then the count. A reader that sees count c
// reads entries c-kSlots+1..c and keeps those whose own n is the expected
// one and that were not overwritten meanwhile (count read again after).
//
// The companion creates the file in the agent's private runtime folder and
// names it in its hello; the agent maps it and removes the name at once, so
// nothing is left behind when either side dies.
//
// Ownership: owns the mapping. Threading: const methods, safe from any thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "health/rank_health.h"

namespace ddp {

/// One announcement: a collective the rank started, and on which group.
struct AnnouncedCollective : CollectiveSeen {
  std::string group;  // empty: the default group
};

class CollectiveAnnouncements {
 public:
  static constexpr size_t kSlots = 16;
  static constexpr size_t kHeaderBytes = 16;
  static constexpr size_t kEntryBytes = 120;
  static constexpr size_t kFileBytes = kHeaderBytes + kSlots * kEntryBytes;

  /// Maps `path`, which must be a regular file of this user directly inside
  /// `folder` with the header above, and removes its name. nullptr with
  /// *error set when it is not such a file.
  static std::unique_ptr<CollectiveAnnouncements> open(const std::string& path, const std::string& folder,
                                                       std::string* error);
  ~CollectiveAnnouncements();
  CollectiveAnnouncements(const CollectiveAnnouncements&) = delete;
  CollectiveAnnouncements& operator=(const CollectiveAnnouncements&) = delete;

  /// How many announcements have been written.
  uint64_t count() const;
  static constexpr uint64_t kReturnedBit = uint64_t{1} << 63;

  /// The announcements numbered above `after` that are still in the file,
  /// oldest first: state "started" ("completed" once its call returned),
  /// age as of `now` (a SteadyTime of the system clock, which is
  /// CLOCK_MONOTONIC like the stamps).
  std::vector<AnnouncedCollective> since(uint64_t after, SteadyTime now) const;

 private:
  explicit CollectiveAnnouncements(const unsigned char* data) : data_(data) {}
  const unsigned char* data_;  // kFileBytes, mapped read-only
};

}  // namespace ddp
