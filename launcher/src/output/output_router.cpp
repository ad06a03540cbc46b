#include "output/output_router.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace ddp {
namespace {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // console or disk gone: the job goes on regardless
    data.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

OutputRouter::OutputRouter(int node_rank, int console_out, int console_err, size_t tail_lines)
    : node_rank_(node_rank), console_out_(console_out), console_err_(console_err), tail_lines_(tail_lines) {}

OutputRouter::~OutputRouter() {
  close_all();
  for (auto& [kind, copy] : filtered_) {
    if (copy.file_fd >= 0) close(copy.file_fd);
  }
}

void OutputRouter::set_filtered_copy(StreamKind kind, std::vector<std::string> needles, int file_fd) {
  FilteredCopy& copy = filtered_[kind];
  if (copy.file_fd >= 0) close(copy.file_fd);
  copy = {std::move(needles), file_fd};
}

void OutputRouter::add(int pipe_fd, const StreamRoute& route) { streams_[pipe_fd] = Stream{route, LineSplitter{}}; }

bool OutputRouter::on_readable(int pipe_fd) {
  auto it = streams_.find(pipe_fd);
  if (it == streams_.end()) return false;
  char buf[65536];
  for (;;) {
    const ssize_t n = read(pipe_fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      close_stream(it);
      return false;
    }
    const std::string_view chunk(buf, static_cast<size_t>(n));
    Stream& stream = it->second;
    if (stream.route.file_fd >= 0) write_all(stream.route.file_fd, chunk);
    stream.splitter.feed(chunk, [&](std::string_view line) { emit_line(stream.route, line); });
  }
}

void OutputRouter::drain_local_rank(int local_rank) {
  std::vector<int> fds;
  for (const auto& [fd, stream] : streams_) {
    if (stream.route.local_rank == local_rank) fds.push_back(fd);
  }
  for (int fd : fds) on_readable(fd);
}

void OutputRouter::close_all() {
  while (!streams_.empty()) {
    const int fd = streams_.begin()->first;
    if (on_readable(fd)) close_stream(streams_.find(fd));
  }
}

std::vector<std::string> OutputRouter::stderr_tail(int local_rank) const {
  auto it = tails_.find(local_rank);
  if (it == tails_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

void OutputRouter::emit_line(const StreamRoute& route, std::string_view line) {
  if (route.kind == StreamKind::kStderr) {
    auto& tail = tails_[route.local_rank];
    tail.emplace_back(line);
    if (tail.size() > tail_lines_) tail.pop_front();
  }
  const auto copy = filtered_.find(route.kind);
  const bool copied = copy != filtered_.end() && copy->second.file_fd >= 0 &&
                      std::any_of(copy->second.needles.begin(), copy->second.needles.end(),
                                  [&](const std::string& needle) { return line.find(needle) != std::string_view::npos; });
  if (!route.to_console && !copied) return;
  // One write per line: lines from different ranks never mix mid-line.
  const std::string text = route.prefix ? fmt::format("{}{}\n", *route.prefix, line)
                                        : fmt::format("[{}:{}] {}\n", node_rank_, route.rank, line);
  if (route.to_console) write_all(route.kind == StreamKind::kStderr ? console_err_ : console_out_, text);
  if (copied) write_all(copy->second.file_fd, text);
}

void OutputRouter::close_stream(std::map<int, Stream>::iterator it) {
  Stream& stream = it->second;
  stream.splitter.flush([&](std::string_view line) { emit_line(stream.route, line); });
  if (stream.route.file_fd >= 0) close(stream.route.file_fd);
  close(it->first);
  streams_.erase(it);
}

}  // namespace ddp
