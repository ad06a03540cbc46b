// The simulated agents' heartbeat stream (see heartbeat_load.h).
#include "heartbeat_load.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>

namespace ddp::bench {
namespace {

namespace pb = ::ddplaunch::v1;
using SteadyClock = std::chrono::steady_clock;

// A real agent gives its heartbeat a few seconds; a reply later than this is
// a failure here, not a latency.
constexpr auto kCallDeadline = std::chrono::seconds(5);
constexpr size_t kMaxErrorsKept = 5;

double seconds_between(SteadyClock::time_point a, SteadyClock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

HeartbeatLoad::HeartbeatLoad(const std::vector<std::unique_ptr<pb::Coordinator::Stub>>& stubs,
                             const std::string& job_id, const std::string& token,
                             const std::vector<JoinedAgent>& agents, const PayloadShape& shape, double rate_hz)
    : rate_hz_(rate_hz) {
  slots_.reserve(agents.size());
  for (size_t i = 0; i < agents.size(); ++i) {
    const JoinedAgent& a = agents[i];
    slots_.push_back(std::make_unique<Slot>(stubs[i % stubs.size()].get(), a.node_rank,
                                            AgentPayload(job_id, token, a.host, a.node_rank, a.rank_start, shape)));
  }
}

HeartbeatLoad::~HeartbeatLoad() { stop(); }

void HeartbeatLoad::start() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
  }
  scheduler_ = std::thread([this] { schedule(); });
}

void HeartbeatLoad::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (scheduler_.joinable()) scheduler_.join();
  // Every call has a deadline, so every reply comes.
  std::unique_lock<std::mutex> lock(mutex_);
  wake_.wait(lock, [this] { return in_flight_ == 0; });
}

// Beat j of the stream (all agents interleaved) is due at start + j / (N R):
// agent j % N, its (j / N)-th beat since start().
void HeartbeatLoad::schedule() {
  const TimePoint start = SteadyClock::now();
  const double spacing_s = 1.0 / (static_cast<double>(slots_.size()) * rate_hz_);
  auto due = [&](int64_t j) {
    return start + std::chrono::duration_cast<SteadyClock::duration>(
                       std::chrono::duration<double>(static_cast<double>(j) * spacing_s));
  };
  int64_t j = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    // Everything due by now goes at once: a late wake-up catches up in a batch.
    for (const TimePoint now = SteadyClock::now(); due(j) <= now; ++j) {
      send(*slots_[static_cast<size_t>(j) % slots_.size()], due(j));
    }
    lock.lock();
    wake_.wait_until(lock, due(j), [this] { return stopping_; });
  }
}

void HeartbeatLoad::send(Slot& slot, TimePoint due) {
  if (slot.in_flight.exchange(true)) {
    record({due, SteadyClock::now(), 0, Outcome::kSkipped, {}});
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++in_flight_;
  }
  const pb::AgentHeartbeatRequest& req = slot.payload.at_beat(slot.beats++);
  slot.ctx = std::make_unique<grpc::ClientContext>();
  slot.ctx->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
  slot.due = due;
  slot.sent = SteadyClock::now();
  slot.stub->async()->AgentHeartbeat(slot.ctx.get(), &req, &slot.reply,
                                     [this, &slot](grpc::Status s) { on_reply(slot, s); });
}

void HeartbeatLoad::on_reply(Slot& slot, const grpc::Status& status) {
  Call call{slot.due, slot.sent, seconds_between(slot.sent, SteadyClock::now()), Outcome::kAnswered, {}};
  if (!status.ok()) {
    call.outcome = Outcome::kFailed;
    call.error = fmt::format("AgentHeartbeat of node {}: {} ({})", slot.node_rank,
                             status.error_message(), static_cast<int>(status.error_code()));
  } else if (slot.reply.generation() != 0) {
    call.outcome = Outcome::kFailed;
    call.error = fmt::format("AgentHeartbeat of node {}: the job is in generation {}, not 0",
                             slot.node_rank, slot.reply.generation());
  }
  record(std::move(call));
  slot.in_flight = false;
  std::lock_guard<std::mutex> lock(mutex_);
  if (--in_flight_ == 0) wake_.notify_all();
}

void HeartbeatLoad::record(Call call) {
  std::lock_guard<std::mutex> lock(calls_mutex_);
  calls_.push_back(std::move(call));
}

LoadWindow HeartbeatLoad::window(TimePoint from, TimePoint to) const {
  LoadWindow w;
  std::lock_guard<std::mutex> lock(calls_mutex_);
  for (const Call& c : calls_) {
    if (c.due < from || c.due >= to) continue;
    if (c.outcome == Outcome::kSkipped) {
      ++w.skipped;
      continue;
    }
    ++w.sent;
    w.max_lag_s = std::max(w.max_lag_s, seconds_between(c.due, c.sent));
    if (c.outcome == Outcome::kAnswered) {
      ++w.answered;
      w.latencies_s.push_back(c.latency_s);
    } else {
      ++w.failed;
      if (w.errors.size() < kMaxErrorsKept) w.errors.push_back(c.error);
    }
  }
  return w;
}

}  // namespace ddp::bench
