#include "companion/companion_channel.h"

#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "companion/collective_announcements.h"
#include "net/host_name.h"

namespace ddp {
namespace {

// The largest message a companion sends (a stack dump) is capped at 200 KiB.
constexpr size_t kMaxMessage = 256 * 1024;
// How often pending requests for stacks are looked for when nothing arrives.
constexpr int kPollMs = 50;

bool same_secret(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

CompanionChannel::CompanionChannel(std::string socket_path, WorkerHealthBoard& board, std::string job_id,
                                   std::string token)
    : path_(std::move(socket_path)),
      board_(board),
      job_id_(std::move(job_id)),
      token_(std::move(token)),
      this_host_(this_host_name()) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path_.size() >= sizeof addr.sun_path) throw std::runtime_error("socket path too long: " + path_);
  std::memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  listen_fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (listen_fd_ < 0) throw std::runtime_error(fmt::format("cannot create a socket: {}", std::strerror(errno)));
  unlink(path_.c_str());
  // Owner only, from the first moment the socket exists.
  const mode_t old_mask = umask(0077);
  const int bound = bind(listen_fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  umask(old_mask);
  if (bound != 0 || listen(listen_fd_, 128) != 0) {
    const int err = errno;
    close(listen_fd_);
    throw std::runtime_error(fmt::format("cannot listen on {}: {}", path_, std::strerror(err)));
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { run(); });
}

CompanionChannel::~CompanionChannel() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(stop_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (const auto& entry : connections_) close(entry.first);
  close(listen_fd_);
  close(stop_fd_);
  unlink(path_.c_str());
}

void CompanionChannel::set_layout(const LocalLayout& layout) {
  std::lock_guard<std::mutex> lock(layout_mutex_);
  layout_ = layout;
  generation_ = layout.assignment.generation;
}

void CompanionChannel::run() {
  std::vector<pollfd> fds;
  for (;;) {
    fds.clear();
    fds.push_back({stop_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& entry : connections_) fds.push_back({entry.first, POLLIN, 0});
    const int ready = poll(fds.data(), fds.size(), kPollMs);
    if (ready < 0 && errno != EINTR) {
      spdlog::warn("the Python companion channel stopped: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[0].revents != 0) return;
    if (fds[1].revents & POLLIN) accept_connection();
    for (size_t i = 2; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto it = connections_.find(fds[i].fd);
      if (it == connections_.end()) continue;
      if (!read_message(fds[i].fd, it->second)) close_connection(fds[i].fd);
    }
    // A connection of an earlier generation belongs to a worker being replaced.
    const int64_t generation = generation_.load();
    for (auto it = connections_.begin(); it != connections_.end();) {
      const auto next = std::next(it);
      if (it->second.greeted && it->second.hello.generation != generation) close_connection(it->first);
      it = next;
    }
    deliver_dump_requests();
  }
}

void CompanionChannel::accept_connection() {
  for (;;) {
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != getuid()) {
      close(fd);  // the directory is private; this is belt and braces
      continue;
    }
    connections_[fd] = Connection{static_cast<int>(cred.pid), false, {}};
  }
}

bool CompanionChannel::read_message(int fd, Connection& c) {
  std::string buffer(kMaxMessage, '\0');
  const ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;  // the companion has gone
  if (static_cast<size_t>(n) > buffer.size()) return true;  // too large: dropped
  buffer.resize(static_cast<size_t>(n));

  if (!c.greeted) {
    const std::optional<CompanionHello> hello = parse_companion_hello(buffer);
    if (!hello || hello->job_id != job_id_ || !same_secret(hello->token, token_)) {
      spdlog::warn("refused a Python companion connection from pid {}: {}", c.pid,
                   hello ? "wrong job id or token" : "no valid hello");
      return false;
    }
    std::lock_guard<std::mutex> lock(layout_mutex_);
    const Assignment& a = layout_.assignment;
    if (hello->generation != a.generation || hello->rank < a.rank_start ||
        hello->rank >= a.rank_start + layout_.nproc) {
      return false;  // a worker of another generation, or not of this node
    }
    // One connection per rank: a newer process of the rank replaces an older one.
    for (auto it = connections_.begin(); it != connections_.end();) {
      const auto next = std::next(it);
      if (it->first != fd && it->second.greeted && it->second.hello.rank == hello->rank) close_connection(it->first);
      it = next;
    }
    c.greeted = true;
    c.hello = *hello;
    if (!hello->announcements.empty()) {
      std::string why;
      auto announcements = CollectiveAnnouncements::open(
          hello->announcements, std::filesystem::path(path_).parent_path().string(), &why);
      if (announcements) {
        board_.attach_announcements(hello->rank, std::move(announcements));
      } else {
        spdlog::warn("rank {}: cannot read the collectives its Python companion announces in {}: {}", hello->rank,
                     hello->announcements, why);
      }
    }
    spdlog::debug("rank {} (pid {}) reports through the Python companion (Python {}{})", hello->rank, c.pid,
                  hello->python, hello->torch.empty() ? "" : ", torch " + hello->torch);
    return true;
  }

  switch (companion_message_kind(buffer)) {
    case CompanionMessageKind::kHeartbeat: {
      int node_rank = 0;
      std::string host;
      {
        std::lock_guard<std::mutex> lock(layout_mutex_);
        node_rank = layout_.assignment.node_rank;
        host = layout_.assignment.host.empty() ? this_host_ : layout_.assignment.host;
      }
      if (auto report = parse_companion_heartbeat(buffer, c.hello, c.pid, node_rank, host)) board_.record(*report);
      break;
    }
    case CompanionMessageKind::kStacks:
      if (auto stacks = parse_companion_stacks(buffer, c.hello.rank)) board_.record_stacks(std::move(*stacks));
      break;
    default:
      break;  // the flight-recorder note and anything newer: nothing to do here
  }
  return true;
}

void CompanionChannel::deliver_dump_requests() {
  const std::string request = companion_dump_request();
  for (auto& [fd, c] : connections_) {
    if (c.greeted && board_.take_stack_dump_request(c.hello.rank)) {
      [[maybe_unused]] ssize_t n = send(fd, request.data(), request.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }
}

void CompanionChannel::close_connection(int fd) {
  close(fd);
  connections_.erase(fd);
}

}  // namespace ddp
