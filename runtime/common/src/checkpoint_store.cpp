#include "ddp/common/checkpoint_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <system_error>

#include "ddp/common/unique_fd.h"

namespace ddp {
namespace {

constexpr char kMagic[8] = {'D', 'D', 'P', 'C', 'K', 'P', 'T', '\0'};
constexpr char kTrailer[8] = {'D', 'D', 'P', 'C', 'K', 'E', 'N', 'D'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kHeaderSize = 48;
constexpr size_t kDataCrcOffset = 40;    // the data CRC covers the header up to here
constexpr size_t kHeaderCrcOffset = 44;  // the header CRC covers the header up to here
constexpr size_t kTrailerSize = sizeof(kTrailer);
constexpr std::string_view kNamePrefix = "ckpt_";
constexpr std::string_view kNameSuffix = ".ddpckpt";
constexpr size_t kReadChunk = size_t{8} << 20;

// Thread-safe, unlike strerror().
std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

void put_u32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
void put_u64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t get_u32(const unsigned char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{p[i]} << (8 * i);
  return v;
}
uint64_t get_u64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

uint32_t crc_update(uint32_t crc, const void* data, size_t n) {
  // zlib's crc32() takes a 32-bit length: feed large buffers in pieces.
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt piece = static_cast<uInt>(std::min<size_t>(n, size_t{1} << 30));
    crc = static_cast<uint32_t>(crc32(crc, p, piece));
    p += piece;
    n -= piece;
  }
  return crc;
}

/// Writes all of data; returns 0 or the errno of the failing write().
int write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return 0;
}

/// Reads up to n bytes, fewer only at end of file. Returns the count, or -1
/// with errno set.
ssize_t read_full(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd, p + got, std::min<size_t>(n - got, size_t{1} << 30));
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(got);
}

std::string file_name(int64_t step) { return fmt::format("{}{:012d}{}", kNamePrefix, step, kNameSuffix); }

/// The step of a final-named file, or nullopt for anything else (temporary
/// files, foreign files, non-canonical spellings such as "ckpt_1.ddpckpt").
std::optional<int64_t> parse_file_name(std::string_view name) {
  if (name.size() <= kNamePrefix.size() + kNameSuffix.size() || name.substr(0, kNamePrefix.size()) != kNamePrefix ||
      name.substr(name.size() - kNameSuffix.size()) != kNameSuffix) {
    return std::nullopt;
  }
  const std::string_view digits =
      name.substr(kNamePrefix.size(), name.size() - kNamePrefix.size() - kNameSuffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int64_t step = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  if (file_name(step) != name) return std::nullopt;
  return step;
}

/// Reads and verifies one checkpoint file. On failure returns nullopt and sets
/// reason to a short, one-line explanation (empty when the file is gone).
std::optional<Checkpoint> read_checkpoint(const std::string& path, int64_t step, std::string& reason) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    // ENOENT: pruned by a concurrent save() since it was listed; not damage.
    reason = errno == ENOENT ? "" : "cannot open: " + errno_text(errno);
    return std::nullopt;
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    reason = "cannot stat: " + errno_text(errno);
    return std::nullopt;
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  const uint64_t min_size = kHeaderSize + kTrailerSize;
  if (size < kHeaderSize) {
    reason = fmt::format("truncated: {} bytes, less than the {}-byte header", size, kHeaderSize);
    return std::nullopt;
  }
  const auto read_error = [&reason] {
    reason = "read error: " + errno_text(errno);
    return std::nullopt;
  };

  unsigned char header[kHeaderSize];
  const ssize_t got = read_full(fd.get(), header, kHeaderSize);
  if (got < 0) return read_error();
  if (static_cast<size_t>(got) < kHeaderSize) {
    // Shrunk after fstat().
    reason = fmt::format("truncated: {} bytes, less than the {}-byte header", got, kHeaderSize);
    return std::nullopt;
  }
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    reason = "bad magic: not a checkpoint file";
    return std::nullopt;
  }
  const uint32_t header_crc = crc_update(0, header, kHeaderCrcOffset);
  if (header_crc != get_u32(header + kHeaderCrcOffset)) {
    reason = "header checksum mismatch";
    return std::nullopt;
  }
  if (const uint32_t version = get_u32(header + 8); version != kFormatVersion) {
    reason = fmt::format("unsupported format version {} (this build reads {})", version, kFormatVersion);
    return std::nullopt;
  }
  if (const auto header_step = static_cast<int64_t>(get_u64(header + 16)); header_step != step) {
    reason = fmt::format("step mismatch: the header says {}", header_step);
    return std::nullopt;
  }
  const uint64_t meta_len = get_u64(header + 24);
  const uint64_t payload_len = get_u64(header + 32);
  // Lengths near 2^64 (only a bug could write them under a valid header CRC) must not wrap.
  constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();
  if (meta_len > kMax - min_size || payload_len > kMax - min_size - meta_len) {
    reason = "impossible lengths in the header";
    return std::nullopt;
  }
  if (const uint64_t expected = min_size + meta_len + payload_len; expected != size) {
    reason = expected > size ? fmt::format("truncated: {} of {} bytes", size, expected)
                             : fmt::format("trailing data: {} bytes, expected {}", size, expected);
    return std::nullopt;
  }

  uint32_t crc = crc_update(0, header, kDataCrcOffset);
  const auto read_part = [&](char* dst, uint64_t len) -> bool {
    for (uint64_t done = 0; done < len;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(len - done, kReadChunk));
      const ssize_t r = read_full(fd.get(), dst + done, want);
      if (r < 0) {
        read_error();
        return false;
      }
      crc = crc_update(crc, dst + done, static_cast<size_t>(r));
      done += static_cast<uint64_t>(r);
      if (static_cast<size_t>(r) < want) {  // shrunk after fstat()
        reason = "truncated while reading: the file shrank";
        return false;
      }
    }
    return true;
  };

  Checkpoint ckpt;
  ckpt.step = step;
  ckpt.path = path;
  std::string meta_text(static_cast<size_t>(meta_len), '\0');
  if (!read_part(meta_text.data(), meta_len)) return std::nullopt;
  // Read straight into the result: no second copy of a large payload.
  ckpt.payload.resize(static_cast<size_t>(payload_len));
  if (!read_part(ckpt.payload.data(), payload_len)) return std::nullopt;

  char trailer[kTrailerSize];
  const ssize_t tgot = read_full(fd.get(), trailer, kTrailerSize);
  if (tgot < 0) return read_error();
  if (static_cast<size_t>(tgot) < kTrailerSize) {
    reason = "truncated while reading the trailer";
    return std::nullopt;
  }
  const uint32_t stored_crc = get_u32(header + kDataCrcOffset);
  if (crc != stored_crc) {
    reason = fmt::format("checksum mismatch (stored {:08x}, computed {:08x})", stored_crc, crc);
    return std::nullopt;
  }
  if (std::memcmp(trailer, kTrailer, kTrailerSize) != 0) {
    reason = "bad trailer";
    return std::nullopt;
  }
  try {
    ckpt.metadata = nlohmann::json::parse(meta_text);
  } catch (const nlohmann::json::exception& e) {
    reason = std::string("metadata is not valid JSON: ") + e.what();
    return std::nullopt;
  }
  return ckpt;
}

/// A name no other writer (thread or process) is using: pid, a per-process
/// counter and random bits. O_EXCL makes a collision an EEXIST, not a clobber.
std::string temp_name(int64_t step) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) ^ rd() ^
           static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  const uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  const uint64_t random_bits = (salt + n * 0x9e3779b97f4a7c15ULL) & 0xffffff;
  return fmt::format(".{}.{}.{}.{:x}.tmp", file_name(step), ::getpid(), n, random_bits);
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, int keep) : dir_(std::move(dir)), keep_(keep) {
  while (dir_.size() > 1 && dir_.back() == '/') dir_.pop_back();
  if (dir_.empty()) throw CheckpointError("checkpoint directory: empty path");
  if (keep_ < 1) {
    throw CheckpointError(fmt::format("checkpoint directory '{}': keep must be >= 1, got {}", dir_, keep_));
  }
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw CheckpointError(fmt::format("cannot create checkpoint directory '{}': {}", dir_, ec.message()));
  struct stat st {};
  if (::stat(dir_.c_str(), &st) != 0) {
    throw CheckpointError(fmt::format("cannot create checkpoint directory '{}': {}", dir_, errno_text(errno)));
  }
  if (!S_ISDIR(st.st_mode)) throw CheckpointError(fmt::format("checkpoint directory '{}': not a directory", dir_));
}

std::string CheckpointStore::path_for(int64_t step) const { return dir_ + "/" + file_name(step); }

std::string CheckpointStore::save(int64_t step, const nlohmann::json& metadata, std::string_view payload) {
  const std::string final_path = path_for(step);
  if (step < 0) throw CheckpointError(fmt::format("cannot save checkpoint in '{}': step {} is negative", dir_, step));
  std::string meta_text;
  try {
    meta_text = metadata.dump();
  } catch (const nlohmann::json::exception& e) {  // e.g. invalid UTF-8 in a string
    throw CheckpointError(fmt::format("cannot save checkpoint '{}': metadata: {}", final_path, e.what()));
  }
  const auto fail = [&final_path](std::string_view what, const std::string& path, int err) {
    return CheckpointError(
        fmt::format("cannot save checkpoint '{}': {} '{}': {}", final_path, what, path, errno_text(err)));
  };

  unsigned char header[kHeaderSize] = {};
  std::memcpy(header, kMagic, sizeof(kMagic));
  put_u32(header + 8, kFormatVersion);
  put_u32(header + 12, 0);
  put_u64(header + 16, static_cast<uint64_t>(step));
  put_u64(header + 24, meta_text.size());
  put_u64(header + 32, payload.size());
  uint32_t crc = crc_update(0, header, kDataCrcOffset);
  crc = crc_update(crc, meta_text.data(), meta_text.size());
  crc = crc_update(crc, payload.data(), payload.size());
  put_u32(header + kDataCrcOffset, crc);
  put_u32(header + kHeaderCrcOffset, crc_update(0, header, kHeaderCrcOffset));

  // Removes the temporary file on every early exit, including exceptions.
  struct TempFile {
    std::string path;
    bool armed = false;
    ~TempFile() {
      if (armed) ::unlink(path.c_str());
    }
  } tmp;
  int raw_fd = -1;
  for (int attempt = 0;; ++attempt) {
    tmp.path = dir_ + "/" + temp_name(step);
    raw_fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (raw_fd >= 0) break;
    if (errno != EEXIST || attempt >= 16) throw fail("create", tmp.path, errno);
  }
  UniqueFd fd(raw_fd);
  tmp.armed = true;

  for (const auto& [data, len] : {std::pair<const void*, size_t>{header, kHeaderSize},
                                  {meta_text.data(), meta_text.size()},
                                  {payload.data(), payload.size()},
                                  {kTrailer, kTrailerSize}}) {
    if (const int err = write_all(fd.get(), data, len); err != 0) throw fail("write", tmp.path, err);
  }
  if (::fsync(fd.get()) != 0) throw fail("fsync", tmp.path, errno);
  if (const int err = fd.close(); err != 0) throw fail("close", tmp.path, err);
  if (::rename(tmp.path.c_str(), final_path.c_str()) != 0) throw fail("rename", tmp.path, errno);
  tmp.armed = false;

  // Make the rename itself durable: without this a power loss could leave
  // the directory without the new name (and, after pruning, without any).
  {
    UniqueFd dir_fd(::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir_fd.get() < 0) throw fail("open directory", dir_, errno);
    // EINVAL: this filesystem cannot sync directories (it orders renames itself).
    if (::fsync(dir_fd.get()) != 0 && errno != EINVAL) throw fail("fsync directory", dir_, errno);
  }

  prune(step);
  return final_path;
}

void CheckpointStore::prune(int64_t just_saved) const {
  std::vector<int64_t> steps;
  try {
    steps = list_steps();
  } catch (const CheckpointError& e) {
    spdlog::warn("checkpoint: not pruning old checkpoints: {}", e.what());
    return;
  }
  if (steps.size() <= static_cast<size_t>(keep_)) return;
  size_t to_delete = steps.size() - static_cast<size_t>(keep_);
  for (const int64_t step : steps) {  // ascending: oldest first
    if (to_delete == 0) break;
    if (step == just_saved) continue;
    const std::string path = path_for(step);
    // ENOENT: another writer pruned it first.
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("checkpoint: cannot delete old checkpoint '{}': {}", path, errno_text(errno));
    }
    --to_delete;
  }
}

std::vector<int64_t> CheckpointStore::list_steps() const {
  std::vector<int64_t> steps;
  DIR* d = ::opendir(dir_.c_str());
  if (d == nullptr) {
    if (errno == ENOENT) return steps;
    throw CheckpointError(fmt::format("cannot list checkpoint directory '{}': {}", dir_, errno_text(errno)));
  }
  struct Closer {
    DIR* d;
    ~Closer() { ::closedir(d); }
  } closer{d};
  for (;;) {
    errno = 0;
    const dirent* entry = ::readdir(d);
    if (entry == nullptr) {
      if (errno != 0) {
        throw CheckpointError(fmt::format("cannot list checkpoint directory '{}': {}", dir_, errno_text(errno)));
      }
      break;
    }
    if (const auto step = parse_file_name(entry->d_name)) steps.push_back(*step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::optional<Checkpoint> CheckpointStore::load_latest(std::vector<SkippedCheckpoint>* skipped) const {
  const std::vector<int64_t> steps = list_steps();
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string path = path_for(*it);
    std::string reason;
    if (auto ckpt = read_checkpoint(path, *it, reason)) return ckpt;
    if (skipped != nullptr && !reason.empty()) skipped->push_back({path, std::move(reason)});
  }
  return std::nullopt;
}

}  // namespace ddp
