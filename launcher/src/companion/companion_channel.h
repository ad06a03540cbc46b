#pragma once
// CompanionChannel: where the Python companion (launcher/python, injected into
// every Python rank through sitecustomize) reports to this node's agent. A
// Unix SOCK_SEQPACKET socket (mode 0600 in the agent's 0700 directory): any
// Python can speak it with the standard library, messages keep their
// boundaries, and the kernel says which process is on the other end
// (SO_PEERCRED) and when it has gone.
//
// A connection counts once it has said hello with this job's id and token,
// the current generation and a rank of this node (companion_messages.h for
// the messages). Its heartbeats then go onto the WorkerHealthBoard exactly as
// the runtime's do, so the coordinator's hang detection treats both alike;
// requests for stacks go out to it and its answers come back to the board.
// A connection from another user is closed at once.
//
// Ownership: owns the listening socket (the file is removed on destruction),
// the connections and one thread. Threading: the thread reads and writes the
// sockets; set_layout() may be called from any thread.

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "companion/companion_messages.h"
#include "agent/local_agent_service.h"
#include "agent/worker_health_board.h"

namespace ddp {

class CompanionChannel {
 public:
  /// Listens on socket_path; throws std::runtime_error when it cannot.
  /// board: not owned, outlives the channel.
  CompanionChannel(std::string socket_path, WorkerHealthBoard& board, std::string job_id, std::string token);
  ~CompanionChannel();
  CompanionChannel(const CompanionChannel&) = delete;
  CompanionChannel& operator=(const CompanionChannel&) = delete;

  /// A new generation's layout of this node: connections of other
  /// generations are dropped.
  void set_layout(const LocalLayout& layout);
  const std::string& socket_path() const { return path_; }

 private:
  struct Connection {
    int pid = 0;  // from SO_PEERCRED
    bool greeted = false;
    CompanionHello hello;
  };

  void run();
  void accept_connection();
  /// False when the connection is to be closed.
  bool read_message(int fd, Connection& c);
  void deliver_dump_requests();
  void close_connection(int fd);

  const std::string path_;
  WorkerHealthBoard& board_;
  const std::string job_id_;
  const std::string token_;
  const std::string this_host_;  // where no advertised host is set
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: ends the thread
  std::mutex layout_mutex_;
  LocalLayout layout_;
  std::atomic<int64_t> generation_{-1};
  std::map<int, Connection> connections_;  // by fd; the thread's own
  std::thread thread_;
};

}  // namespace ddp
