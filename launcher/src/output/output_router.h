#pragma once
// OutputRouter: moves the workers' stdout/stderr from their pipes to the
// per-rank log files (raw bytes) and to the console (whole lines prefixed
// "[node:rank] ", or a prefix of the caller's), copies the lines that match a
// filter into one file per stream kind (torchrun's --duplicate-*-filters), and
// keeps the last stderr lines of each rank for failure reports.
//
// Ownership: owns every pipe and file descriptor handed to add(); closes them
// at end of stream or in close_all(). Threading: one thread (the event loop).

#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "output/line_splitter.h"

namespace ddp {

enum class StreamKind { kStdout, kStderr };

struct StreamRoute {
  int rank = 0;
  int local_rank = 0;
  StreamKind kind = StreamKind::kStdout;
  bool to_console = true;
  int file_fd = -1;  // log file, -1 for none
  /// Put before each console line; unset: "[node:rank] ".
  std::optional<std::string> prefix;
};

class OutputRouter {
 public:
  /// console_out/console_err receive the prefixed lines (not owned).
  OutputRouter(int node_rank, int console_out, int console_err, size_t tail_lines = 20);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  /// Starts routing pipe_fd (non-blocking read end).
  void add(int pipe_fd, const StreamRoute& route);
  /// Reads what pipe_fd has now. Returns false once the stream has ended; its
  /// descriptors are closed by then.
  bool on_readable(int pipe_fd);
  /// Reads everything already written by a local rank (e.g. right after it
  /// exited, so its last words are in the report).
  void drain_local_rank(int local_rank);
  /// Drains and closes every stream.
  void close_all();
  /// The last lines this local rank wrote to stderr in the current attempt.
  std::vector<std::string> stderr_tail(int local_rank) const;
  /// The node rank shown in "[node:rank]" (known once the node has joined).
  void set_node_rank(int node_rank) { node_rank_ = node_rank; }
  /// Forgets the tails (a new attempt starts).
  void reset_tails() { tails_.clear(); }
  /// From now on, every line of kind that contains one of needles is also
  /// written, prefixed as on the console, to file_fd (owned; replaces and
  /// closes the previous one). No needles: nothing is copied.
  void set_filtered_copy(StreamKind kind, std::vector<std::string> needles, int file_fd);

 private:
  struct Stream {
    StreamRoute route;
    LineSplitter splitter;
  };
  struct FilteredCopy {
    std::vector<std::string> needles;
    int file_fd = -1;
  };
  void emit_line(const StreamRoute& route, std::string_view line);
  void close_stream(std::map<int, Stream>::iterator it);

  int node_rank_;
  int console_out_;
  int console_err_;
  size_t tail_lines_;
  std::map<int, Stream> streams_;  // by pipe fd
  std::map<int, std::deque<std::string>> tails_;  // by local rank
  std::map<StreamKind, FilteredCopy> filtered_;
};

}  // namespace ddp
