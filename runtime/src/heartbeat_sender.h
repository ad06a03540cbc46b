#pragma once
// HeartbeatSender: the worker's heartbeat thread under ddplaunch. Every
// interval it sends the agent this rank's progress (step, phase, last step
// time) and the tail of the collective flight record, and dumps every
// thread's stack when the launcher asks (it is about to tear down a hung job).
// Its own thread, so a training thread stuck in a collective or a long kernel
// still reports; a process that is stopped or starved reports nothing, which
// is what the launcher's silent-rank detection looks for.
//
// Stacks: when a heartbeat's reply asks for them, the sender's thread takes
// every thread's stack (dump_all_thread_stacks(): stacks.log), keeps them and
// sends the next heartbeat right away carrying them; they are kept until a
// heartbeat with them got through.
//
// Ownership: borrows the connection, progress and collective; the owner
// (ProcessGroup) destroys the sender before any of them.

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "ddp/runtime/agent_store.h"
#include "ddp/runtime/collective.h"
#include "ddp/runtime/health.h"

namespace ddp {

class HeartbeatSender {
 public:
  HeartbeatSender(AgentConnection& agent, const AgentRegistration& who, const TrainingProgress& progress,
                  const Collective& collective, Duration interval);
  ~HeartbeatSender();  // stops and joins
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

  /// No more heartbeats (the thread ends); idempotent.
  void stop();

 private:
  void run();
  bool stopped();
  WorkerHeartbeatData snapshot() const;

  AgentConnection& agent_;
  const AgentRegistration who_;
  const TrainingProgress& progress_;
  const Collective& collective_;
  const Duration interval_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  // Taken on request, not yet delivered. Touched by the sender's thread only,
  // and by the destructor once that thread has been joined.
  std::optional<ProcessStacks> pending_stacks_;
  std::thread thread_;
};

}  // namespace ddp
