#include "heartbeat_sender.h"

#include <unistd.h>

namespace ddp {
namespace {

// Records carried per heartbeat: enough to see the open collectives and
// compare the last few across ranks (desync), small enough to send each second.
constexpr size_t kRecentRecords = 16;

}  // namespace

HeartbeatSender::HeartbeatSender(AgentConnection& agent, const AgentRegistration& who,
                                 const TrainingProgress& progress, const Collective& collective, Duration interval)
    : agent_(agent), who_(who), progress_(progress), collective_(collective), interval_(interval) {
  thread_ = std::thread([this] { run(); });
}

HeartbeatSender::~HeartbeatSender() {
  const bool was_running = !stopped();
  stop();
  if (thread_.joinable()) thread_.join();
  // A clean exit, said so: the launcher stops expecting heartbeats from this
  // rank (a silenced sender stays silent).
  if (!was_running) return;
  WorkerHeartbeatData last = snapshot();
  last.exiting = true;
  try {
    agent_.send_heartbeat(last, std::chrono::seconds(1));
  } catch (const StoreError&) {
  }
}

bool HeartbeatSender::stopped() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stopping_;
}

void HeartbeatSender::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

WorkerHeartbeatData HeartbeatSender::snapshot() const {
  WorkerHeartbeatData hb;
  hb.rank = who_.rank;
  hb.local_rank = who_.local_rank;
  hb.pid = static_cast<int>(getpid());
  hb.generation = who_.generation;
  hb.step = progress_.step();
  hb.phase = to_string(progress_.phase());
  hb.step_seconds = progress_.step_seconds();
  hb.busy_seconds = progress_.busy_seconds();
  const FlightRecorder& record = collective_.flight_record();
  hb.recent = record.tail(kRecentRecords);
  hb.last_enqueued = record.last_enqueued();
  hb.last_completed = record.last_completed();
  for (const CollectiveRecord& r : hb.recent) {
    if (r.state != CollectiveState::kEnqueued) hb.last_started = std::max(hb.last_started, r.sequence);
  }
  return hb;
}

void HeartbeatSender::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    try {
      if (agent_.send_heartbeat(snapshot(), interval_ + std::chrono::seconds(2))) dump_all_thread_stacks();
    } catch (const StoreError&) {
      // The agent is gone or busy: the next beat tries again (the launcher
      // judges silence, not this side).
    }
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

}  // namespace ddp
