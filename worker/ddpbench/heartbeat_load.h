#pragma once
// The heartbeat stream of N simulated agents at R Hz against one coordinator,
// for `ddpbench heartbeats`. Agent i's beats are due at
// start + (i / N + k) / R, so the N agents are spread evenly over the
// interval, as independent agents drift apart. One scheduler thread sends
// each beat when due through gRPC's callback API (the replies come back on
// gRPC's own threads), so the client needs no thread per agent. Like a real
// agent, a simulated one never has two heartbeats in flight: a beat due while
// the previous one is unanswered is skipped and counted.
//
// Every call is recorded (when due, when sent, its latency from send to
// reply, or its failure); a measurement window reads the beats due in it,
// so a window counts exactly the beats it asked for, and a scheduler that
// fell behind shows as beats sent late (lag) or never (fewer sent).
//
// Ownership: borrows the stubs, which must outlive the load.
// Threading: start(), stop() and window() from one controlling thread; the
// destructor stops the load and waits for every call in flight.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ddplaunch/v1/coordinator.grpc.pb.h"
#include "heartbeat_payload.h"
#include "rendezvous_run.h"

namespace ddp::bench {

/// What the beats due within one window measured.
struct LoadWindow {
  int64_t sent = 0;       // calls started (some perhaps after the window, when the scheduler lagged)
  int64_t answered = 0;   // of those, answered OK (their latencies are below)
  int64_t failed = 0;     // answered with an error
  int64_t skipped = 0;    // beats due while the agent's previous call was in flight
  std::vector<double> latencies_s;  // send to reply, of the answered calls
  double max_lag_s = 0;   // the latest a call was sent after it was due
  std::vector<std::string> errors;  // the first few failures
};

class HeartbeatLoad {
 public:
  HeartbeatLoad(const std::vector<std::unique_ptr<::ddplaunch::v1::Coordinator::Stub>>& stubs,
                const std::string& job_id, const std::string& token, const std::vector<JoinedAgent>& agents,
                const PayloadShape& shape, double rate_hz);
  ~HeartbeatLoad();
  HeartbeatLoad(const HeartbeatLoad&) = delete;
  HeartbeatLoad& operator=(const HeartbeatLoad&) = delete;

  /// Starts sending; each agent's beat count goes on from where the last stop() left it.
  void start();
  /// Stops sending and waits for the calls in flight (each has a deadline).
  void stop();
  /// The beats due within [from, to). Complete once stop() returned.
  LoadWindow window(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) const;

 private:
  using TimePoint = std::chrono::steady_clock::time_point;
  enum class Outcome { kAnswered, kFailed, kSkipped };
  struct Call {
    TimePoint due, sent;
    double latency_s = 0;
    Outcome outcome = Outcome::kSkipped;
    std::string error;
  };
  // One simulated agent: its payload and the state of its one call.
  struct Slot {
    Slot(::ddplaunch::v1::Coordinator::Stub* s, int node, AgentPayload p)
        : stub(s), node_rank(node), payload(std::move(p)) {}
    ::ddplaunch::v1::Coordinator::Stub* stub;
    int node_rank;
    AgentPayload payload;
    int64_t beats = 0;
    std::atomic<bool> in_flight{false};
    std::unique_ptr<grpc::ClientContext> ctx;
    ::ddplaunch::v1::AgentHeartbeatReply reply;
    TimePoint due, sent;
  };

  void schedule();
  void send(Slot& slot, TimePoint due);
  void on_reply(Slot& slot, const grpc::Status& status);
  void record(Call call);

  const double rate_hz_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::thread scheduler_;
  std::mutex mutex_;  // guards stopping_ and in_flight_ (the scheduler's wake-up and stop()'s wait)
  std::condition_variable wake_;
  bool stopping_ = false;
  int64_t in_flight_ = 0;
  mutable std::mutex calls_mutex_;
  std::vector<Call> calls_;
};

}  // namespace ddp::bench
