#pragma once
// CheckpointStore: crash-safe checkpoint files in one directory. LibTorch-free:
// the caller serializes model/optimizer/RNG/data position into an opaque byte
// string (the payload) and describes it with JSON metadata.
//
// Crash safety: save() writes a uniquely named temporary file (O_EXCL) in the
// same directory, fsyncs it, renames it to its final name and fsyncs the
// directory, so a final-named file is either absent or complete, even after
// SIGKILL or power loss. Only after that are old checkpoints pruned. Every file
// carries lengths, a CRC32 and a trailer, so load_latest() detects files
// damaged by other means (truncation, bit rot, a copy cut short) and falls back
// to the newest checkpoint that verifies.
//
// Ownership: the store owns nothing but its directory name; every call opens
// and closes its own files. Checkpoints returned by load_latest() are plain
// values owned by the caller.
//
// Threading: load_latest(), list_steps() and dir() may run concurrently with
// anything, in any process, including a save() in progress (readers see either
// the old set of files or the complete new one). save() should be called by one
// writer per directory at a time (rank 0); concurrent writers do not corrupt
// files but may prune each other's checkpoints.
//
// File format, version 1 (integers little-endian):
//   offset  size  field
//        0     8  magic "DDPCKPT\0"
//        8     4  format version (1)
//       12     4  flags, 0 (reserved)
//       16     8  step (int64)
//       24     8  metadata length M (uint64)
//       32     8  payload length P (uint64)
//       40     4  data CRC32: bytes [0,40) of the header, then metadata, then payload
//       44     4  header CRC32: bytes [0,44), so damaged lengths are caught before use
//       48     M  metadata, JSON text (UTF-8)
//     48+M     P  payload bytes
//   48+M+P     8  trailer magic "DDPCKEND"
// Final name: ckpt_<step, 12+ digits zero-padded>.ddpckpt, e.g.
// ckpt_000000001200.ddpckpt. Temporary files start with '.' and end in ".tmp";
// they are never read and may be deleted by hand when no save() is running.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddp {

/// An I/O or usage error; the message is one line naming the path and the cause.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One verified checkpoint.
struct Checkpoint {
  int64_t step = 0;
  std::string path;
  nlohmann::json metadata;
  std::string payload;
};

/// A final-named checkpoint file that load_latest() passed over, and why,
/// e.g. "truncated: 120 of 4096 bytes" or "checksum mismatch (...)".
struct SkippedCheckpoint {
  std::string path;
  std::string reason;
};

class CheckpointStore {
 public:
  /// Creates dir (and its parents) when missing. keep >= 1 is how many of the
  /// newest checkpoints save() leaves in place. Throws CheckpointError when
  /// keep < 1 or dir cannot be created or is not a directory.
  CheckpointStore(std::string dir, int keep);

  /// Durably writes checkpoint `step` (>= 0) and returns its final path; an
  /// existing checkpoint of the same step is replaced atomically. Then deletes
  /// the oldest checkpoints (by step) so that `keep` remain: the one just
  /// written and the newest keep-1 others;
  /// a failed deletion is logged, not thrown, since the new checkpoint is safe.
  /// Throws CheckpointError (naming the path and strerror) on any write error,
  /// after removing its temporary file, or when metadata cannot be serialized.
  std::string save(int64_t step, const nlohmann::json& metadata, std::string_view payload);

  /// The newest checkpoint that verifies. Damaged final-named files are passed
  /// over in favour of older ones and, when skipped is given, appended to it
  /// newest first (callers should log them). Temporary files are ignored.
  /// std::nullopt when no checkpoint verifies or dir is empty or missing.
  /// Throws CheckpointError when dir exists but cannot be listed, so that a
  /// permission problem is not mistaken for "start from scratch".
  std::optional<Checkpoint> load_latest(std::vector<SkippedCheckpoint>* skipped = nullptr) const;

  /// Steps of the final-named files, ascending; the files are not verified.
  /// Empty when dir is missing; throws CheckpointError when it cannot be listed.
  std::vector<int64_t> list_steps() const;

  /// The final path save() uses for step.
  std::string path_for(int64_t step) const;

  const std::string& dir() const { return dir_; }

 private:
  /// Deletes the oldest checkpoints so that keep_ remain, sparing just_saved.
  void prune(int64_t just_saved) const;

  std::string dir_;
  int keep_;
};

}  // namespace ddp
