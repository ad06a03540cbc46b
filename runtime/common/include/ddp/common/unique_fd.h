#pragma once
// Owns a file descriptor: closed on every way out of a scope.
//
// Threading: a plain value owned by one thread.

#include <errno.h>
#include <unistd.h>

#include <utility>

namespace ddp {

class UniqueFd {
 public:
  explicit UniqueFd(int fd = -1) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  /// Gives the descriptor up without closing it.
  int release() { return std::exchange(fd_, -1); }
  /// Closes now and returns close()'s errno (0 on success): NFS and some
  /// filesystems report write-back errors only here.
  int close() {
    const int fd = std::exchange(fd_, -1);
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

}  // namespace ddp
