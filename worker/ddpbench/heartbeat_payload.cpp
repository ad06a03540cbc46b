// A simulated agent's heartbeat (see heartbeat_payload.h). The figures are
// those of a busy 8-GPU node in data-parallel training: steps of 250 ms, four
// gradient buckets of 25 MiB all-reduced per step, GPUs at 93-99 % with
// 70 GiB of 80 in use. Small deterministic jitter per rank and beat keeps
// the values moving, as real samples do, without a random source.
#include "heartbeat_payload.h"

#include <fmt/format.h>

#include <array>

namespace ddp::bench {
namespace {

namespace pb = ::ddplaunch::v1;

constexpr int kRecentRecords = 16;        // the runtime's heartbeat carries this many
constexpr int kStepsPerBeat = 4;          // 250 ms steps at a 1 s heartbeat
constexpr int kBucketsPerStep = 4;        // all-reduces per step
constexpr int64_t kBucketBytes = 25 << 20;
constexpr double kStepSeconds = 0.25;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr std::array<const char*, 4> kPhases = {"forward", "backward", "optimizer", "data"};

// 0..modulo-1, different for each (rank, beat, salt); a cheap integer hash.
uint64_t jitter(int rank, int64_t beat, uint64_t salt, uint64_t modulo) {
  uint64_t x = (static_cast<uint64_t>(rank) << 32) ^ static_cast<uint64_t>(beat) ^ (salt * 0x9E3779B97F4A7C15ull);
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x % modulo;
}

}  // namespace

AgentPayload::AgentPayload(const std::string& job_id, const std::string& token, const std::string& host,
                           int node_rank, int rank_start, const PayloadShape& shape) {
  req_.mutable_auth()->set_job_id(job_id);
  req_.mutable_auth()->set_token(token);
  req_.set_node_rank(node_rank);
  req_.set_generation(0);
  req_.set_host(host);
  for (int local = 0; local < shape.nproc; ++local) {
    const int rank = rank_start + local;
    pb::WorkerHeartbeat* w = req_.add_workers();
    w->set_rank(rank);
    w->set_local_rank(local);
    w->set_pid(100000 + rank);
    w->set_generation(0);
    for (int i = 0; i < kRecentRecords; ++i) {
      pb::CollectiveRecord* c = w->add_recent();
      c->set_op("all_reduce");
      c->set_bytes(kBucketBytes);
      c->set_dtype("float32");
    }
    if (!shape.resources) continue;
    pb::RankResources* r = req_.add_resources();
    r->set_rank(rank);
    r->set_pid(100000 + rank);
    for (int g = 0; g < shape.gpus_per_rank; ++g) {
      pb::GpuSample* gpu = r->add_gpus();
      const int index = local * shape.gpus_per_rank + g;
      gpu->set_index(index);
      gpu->set_uuid(fmt::format("GPU-{:08x}-{:04x}-4{:03x}-8000-{:012x}", node_rank, index, rank & 0xfff, rank));
      gpu->set_mem_total_bytes(80 * kGiB);
      gpu->set_sm_clock_mhz(1980);
      gpu->set_xid_errors(0);
      gpu->set_ecc_errors(0);
    }
  }
}

const pb::AgentHeartbeatRequest& AgentPayload::at_beat(int64_t beat) {
  const int64_t steps = beat * kStepsPerBeat;
  const auto completed = static_cast<uint64_t>(steps * kBucketsPerStep);
  for (pb::WorkerHeartbeat& w : *req_.mutable_workers()) {
    const int rank = w.rank();
    w.set_step(steps);
    w.set_phase(kPhases[jitter(rank, beat, 1, kPhases.size())]);
    w.set_step_seconds(kStepSeconds + 0.001 * static_cast<double>(jitter(rank, beat, 2, 10)));
    w.set_busy_seconds(0.8 * w.step_seconds());
    // The newest record is the bucket in flight; the others have completed.
    w.set_last_enqueued(completed + 1);
    w.set_last_started(completed + 1);
    w.set_last_completed(completed);
    for (int i = 0; i < w.recent_size(); ++i) {
      pb::CollectiveRecord* c = w.mutable_recent(i);
      const int back = w.recent_size() - 1 - i;  // 0: the newest
      c->set_sequence(completed + 1 - static_cast<uint64_t>(back));
      c->set_state(back == 0 ? "started" : "completed");
      c->set_age_ms(back * 60 + static_cast<int64_t>(jitter(rank, beat, 3, 20)));
    }
    w.set_held_ms(static_cast<int64_t>(jitter(rank, beat, 4, 1000)));
  }
  for (pb::RankResources& r : *req_.mutable_resources()) {
    const int rank = r.rank();
    r.set_age_ms(static_cast<int64_t>(jitter(rank, beat, 5, 1000)));
    r.set_cpu_percent(100.0 + static_cast<double>(jitter(rank, beat, 6, 300)) / 10.0);
    r.set_rss_bytes(6 * kGiB + (jitter(rank, beat, 7, 64) << 20));
    r.set_threads(40 + static_cast<int>(jitter(rank, beat, 8, 4)));
    r.set_voluntary_ctx_switches(static_cast<uint64_t>(beat) * 900 + jitter(rank, beat, 9, 100));
    r.set_nonvoluntary_ctx_switches(static_cast<uint64_t>(beat) * 30 + jitter(rank, beat, 10, 10));
    for (pb::GpuSample& g : *r.mutable_gpus()) {
      g.set_util_percent(93.0 + static_cast<double>(jitter(rank, beat, 11 + g.index(), 7)));
      g.set_mem_used_bytes(70 * kGiB + (jitter(rank, beat, 12, 512) << 20));
      g.set_rank_mem_bytes(g.mem_used_bytes() - (512u << 20));
      g.set_temperature_c(62 + static_cast<int>(jitter(rank, beat, 13, 9)));
      g.set_power_w(520.0 + static_cast<double>(jitter(rank, beat, 14, 80)));
    }
  }
  return req_;
}

}  // namespace ddp::bench
