#pragma once
// The files of a folder tree as they are finished, for `--sync`: inotify's
// IN_CLOSE_WRITE (written and closed) and IN_MOVED_TO (renamed into place,
// as torch.save to a temp name and ddptrain's checkpoints do) say a file is
// finished; IN_MOVED_FROM and IN_DELETE say it is gone. Folders created or
// moved in later are watched too, and the files already in them reported.
//
// Threading: one owner thread; fd() may be polled from that thread.

#include <map>
#include <string>
#include <vector>

namespace ddp {

class DirectoryWatch {
 public:
  /// Watches `root` (which must exist) and every folder below it. Throws
  /// std::system_error when inotify cannot be set up.
  explicit DirectoryWatch(std::string root);
  ~DirectoryWatch();
  DirectoryWatch(const DirectoryWatch&) = delete;
  DirectoryWatch& operator=(const DirectoryWatch&) = delete;

  struct Event {
    enum class Kind { kFinished, kGone };
    Kind kind;
    std::string relative_path;  // '/'-separated, below root
  };

  /// Readable when events wait.
  int fd() const { return fd_; }
  /// What happened since the last call; never blocks.
  std::vector<Event> read_events();
  /// Every regular file below root now, relative paths (the state at start).
  std::vector<std::string> existing_files() const;

 private:
  void watch_tree(const std::string& relative_dir, std::vector<Event>* found);

  std::string root_;
  int fd_ = -1;
  std::map<int, std::string> dirs_;  // watch descriptor -> folder, relative to root ("" is root)
};

}  // namespace ddp
