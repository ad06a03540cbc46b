#pragma once
// Reading a log file another process is still writing: its last lines, and
// what it gains from an offset on (for `attach` and `logs -f`).
//
// Threading: a FileFollower belongs to one thread.

#include <sys/types.h>

#include <cstdio>
#include <string>

namespace ddp {

/// The last `lines` complete lines of the file (each with its newline), read
/// from its end; empty when it cannot be read. *read_to: where they end, and
/// where following it should start (a line still being written is left to
/// the follower, whole).
std::string last_lines_of_file(const std::string& path, int lines, off_t* read_to = nullptr);

/// Follows one file from an offset: copy_new() copies what was appended since
/// the last call. An inotify descriptor says when the file changed, for poll().
class FileFollower {
 public:
  /// Starts at `offset` (a file later truncated is read again from its start).
  FileFollower(std::string path, off_t offset);
  ~FileFollower();
  FileFollower(const FileFollower&) = delete;
  FileFollower& operator=(const FileFollower&) = delete;

  /// Readable when the file was written to (or -1 without inotify: poll with a timeout).
  int change_fd() const { return inotify_fd_; }
  /// Copies everything appended since the last call to `out`, in chunks (a
  /// whole log of gigabytes is not held in memory); empties change_fd's
  /// queue. Returns the bytes copied.
  size_t copy_new(std::FILE* out);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  off_t offset_;
  int inotify_fd_ = -1;
};

}  // namespace ddp
