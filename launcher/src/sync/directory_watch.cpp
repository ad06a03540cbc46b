#include "sync/directory_watch.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

namespace ddp {
namespace fs = std::filesystem;
namespace {

constexpr uint32_t kWatched = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_DELETE | IN_CREATE | IN_ONLYDIR;

std::string join(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

}  // namespace

DirectoryWatch::DirectoryWatch(std::string root) : root_(std::move(root)) {
  fd_ = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "inotify_init1");
  const int wd = inotify_add_watch(fd_, root_.c_str(), kWatched);
  if (wd < 0) {
    const int err = errno;
    close(fd_);
    throw std::system_error(err, std::generic_category(), "cannot watch " + root_);
  }
  dirs_[wd] = "";
  std::error_code ec;
  for (fs::directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) watch_tree(it->path().filename().string(), nullptr);
  }
}

DirectoryWatch::~DirectoryWatch() {
  if (fd_ >= 0) close(fd_);
}

void DirectoryWatch::watch_tree(const std::string& relative_dir, std::vector<Event>* found) {
  const fs::path dir = fs::path(root_) / relative_dir;
  const int wd = inotify_add_watch(fd_, dir.c_str(), kWatched);
  if (wd < 0) return;  // gone again, or the watch limit: its files are not synced
  dirs_[wd] = relative_dir;
  // What was written into it before the watch existed.
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string rel = join(relative_dir, it->path().filename().string());
    if (it->is_symlink(ec)) continue;
    if (it->is_directory(ec)) {
      watch_tree(rel, found);
    } else if (found != nullptr && it->is_regular_file(ec)) {
      found->push_back({Event::Kind::kFinished, rel});
    }
  }
}

std::vector<DirectoryWatch::Event> DirectoryWatch::read_events() {
  std::vector<Event> events;
  alignas(inotify_event) char buf[16384];
  for (;;) {
    const ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      if (e->mask & IN_IGNORED) {
        dirs_.erase(e->wd);
        continue;
      }
      const auto dir = dirs_.find(e->wd);
      if (dir == dirs_.end() || e->len == 0) continue;
      const std::string rel = join(dir->second, e->name);
      if (e->mask & IN_ISDIR) {
        if (e->mask & (IN_CREATE | IN_MOVED_TO)) watch_tree(rel, &events);
        continue;  // a folder that went takes its watch with it (IN_IGNORED)
      }
      if (e->mask & (IN_CLOSE_WRITE | IN_MOVED_TO)) {
        events.push_back({Event::Kind::kFinished, rel});
      } else if (e->mask & (IN_MOVED_FROM | IN_DELETE)) {
        events.push_back({Event::Kind::kGone, rel});
      }
    }
  }
  return events;
}

std::vector<std::string> DirectoryWatch::existing_files() const {
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(root_, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec) && !it->is_symlink(ec)) {
      files.push_back(fs::relative(it->path(), root_, ec).generic_string());
    }
  }
  return files;
}

}  // namespace ddp
