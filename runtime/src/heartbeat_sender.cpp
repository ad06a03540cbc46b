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
  last.stacks = std::move(pending_stacks_);
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
  hb.activity = progress_.activity();
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
    bool send_now = false;
    try {
      WorkerHeartbeatData hb = snapshot();
      hb.stacks = pending_stacks_;  // a copy: kept until it got through
      const bool asked = agent_.send_heartbeat(hb, interval_ + std::chrono::seconds(2));
      pending_stacks_.reset();
      if (asked) {
        // The launcher gives the ranks a couple of intervals before it stops
        // a hung job: the stacks go out in the next heartbeat, now (on the
        // usual beat when this one carried stacks already, so an agent that
        // kept asking could not make this thread spin).
        pending_stacks_ = dump_all_thread_stacks();
        send_now = !hb.stacks.has_value();
      }
    } catch (const StoreError&) {
      // The agent is gone or busy: the next beat tries again (the launcher
      // judges silence, not this side).
    } catch (const std::exception&) {
      // Out of memory taking the stacks: this thread must go on beating.
    }
    lock.lock();
    if (!send_now) wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

}  // namespace ddp
