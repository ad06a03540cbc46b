#include "detach/console_tail.h"

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace ddp {
namespace {

// What a tail reads back from the end at most: a few thousand long lines.
constexpr off_t kTailWindow = 1 << 20;

std::string read_range(int fd, off_t from, off_t to) {
  std::string out;
  out.resize(static_cast<size_t>(std::max<off_t>(0, to - from)));
  size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = pread(fd, out.data() + got, out.size() - got, from + static_cast<off_t>(got));
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace

std::string last_lines_of_file(const std::string& path, int lines, off_t* read_to) {
  if (read_to != nullptr) *read_to = 0;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  fstat(fd, &st);
  const off_t end = st.st_size;
  std::string text = read_range(fd, std::max<off_t>(0, end - kTailWindow), end);
  close(fd);
  text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);  // complete lines only
  if (read_to != nullptr) *read_to = std::max<off_t>(0, end - kTailWindow) + static_cast<off_t>(text.size());
  if (lines <= 0) return {};
  // Walk back over `lines` newlines (the last one ends the last line).
  size_t start = text.size();
  for (int seen = 0; start > 0; --start) {
    if (text[start - 1] == '\n' && start != text.size() && ++seen == lines) break;
  }
  return text.substr(start);
}

FileFollower::FileFollower(std::string path, off_t offset) : path_(std::move(path)), offset_(offset) {
  inotify_fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd_ >= 0 && inotify_add_watch(inotify_fd_, path_.c_str(), IN_MODIFY | IN_ATTRIB) < 0) {
    close(inotify_fd_);
    inotify_fd_ = -1;
  }
}

FileFollower::~FileFollower() {
  if (inotify_fd_ >= 0) close(inotify_fd_);
}

size_t FileFollower::copy_new(std::FILE* out) {
  if (inotify_fd_ >= 0) {
    char events[4096];
    while (read(inotify_fd_, events, sizeof events) > 0) {
    }
  }
  const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  struct stat st {};
  fstat(fd, &st);
  if (st.st_size < offset_) offset_ = 0;  // truncated: what is there now is new
  size_t copied = 0;
  char chunk[1 << 16];
  ssize_t n;
  while ((n = pread(fd, chunk, sizeof chunk, offset_)) > 0) {
    std::fwrite(chunk, 1, static_cast<size_t>(n), out);
    offset_ += n;
    copied += static_cast<size_t>(n);
  }
  close(fd);
  return copied;
}

}  // namespace ddp
