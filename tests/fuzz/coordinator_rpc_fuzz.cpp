// libFuzzer target for the coordinator's RPC handlers and the heartbeat
// pipeline, through the plain logic classes: Coordinator and CoordinatorJob
// (coordinator/), WorkerHealthBoard (agent/) and the HangDetector inside the
// job (health/), with FakeClock. The gRPC adapters cannot run without a
// server, so this harness does what they do: the size and range checks of
// CoordinatorService, the local agent service's generation check, and the
// protocol conversions (heartbeat_proto.h, rank_stacks_proto.h,
// job_stop_proto.h) both ways, with the same helpers.
//
// The input, read with FuzzedDataProvider, sets up one job (its shape and
// timeouts) and then makes up to 256 calls in any order, with field values
// mostly plausible and sometimes anything the protocol can carry: joins and
// agent heartbeats of up to 4 agents, worker heartbeats and stack answers
// through each agent's board, outcomes, watches, the KV store, barriers,
// NCCL IDs, status, stacks, stop requests, epochs, agents or workers going
// quiet, and time passing (meanwhile the agents that are up heartbeat, and
// their live workers repeat their last heartbeats). The seeds are inputs
// kept from a campaign that reach a desync, a stuck collective, merged
// stacks, a stop and a restart, and a barrier; a change to what this file
// reads from the input leaves them valid but no longer aimed.
//
// Invariants: no crash, no undefined behaviour, and consistent answers:
//  - every call parked (join, wait, barrier, watch, stacks) is answered
//    exactly once, at the latest when the coordinator shuts down;
//  - the agents of one generation get distinct node ranks, rank ranges that
//    tile [0, world size) and one master address;
//  - the KV store behaves as a map of the generation (set/get, add,
//    compare-set, delete-prefix), and an NCCL ID is the same for every caller
//    of one (generation, key);
//  - a heartbeat's answer is the job's generation; the ranks asked for
//    stacks are the node's own; a chosen stop step is not negative;
//  - status is JSON naming the job's generation; a watch answers for the
//    generation it was asked about;
//  - a worker report forwarded by its agent converts back to itself.

#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/worker_health_board.h"
#include "coordinator/coordinator.h"
#include "coordinator/job_stop_proto.h"
#include "fuzz_check.h"
#include "health/heartbeat_proto.h"
#include "stacks/rank_stacks_proto.h"

namespace {

namespace pb = ::ddplaunch::v1;
using ddp::Duration;
using Limits = ddp::CoordinatorLimits;

constexpr int kAgents = 4;
constexpr int kMaxCalls = 256;
const char* const kJob = "job-1";
const char* const kToken = "secret-token";

// Deterministic IDs, distinct per call, kUniqueIdBytes long.
class CountingIds final : public ddp::UniqueIdSource {
 public:
  std::string create_id() override {
    std::string id(ddp::kUniqueIdBytes, '\0');
    const uint64_t n = ++made_;
    for (int i = 0; i < 8; ++i) id[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
    return id;
  }
  std::string describe() const override { return "counting"; }

 private:
  uint64_t made_ = 0;
};

// A protobuf string field holds valid UTF-8 (its parser refuses anything
// else): invalid bytes become '?'.
std::string utf8(std::string s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n > 1 && i + n <= s.size()) {
      for (size_t k = 1; k < n; ++k) {
        if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) n = 0;
      }
      // Overlong forms, surrogates and code points past U+10FFFF.
      const unsigned char d = n ? static_cast<unsigned char>(s[i + 1]) : 0;
      if (n == 2 && c < 0xc2) n = 0;
      if (n == 3 && ((c == 0xe0 && d < 0xa0) || (c == 0xed && d >= 0xa0))) n = 0;
      if (n == 4 && ((c == 0xf0 && d < 0x90) || c > 0xf4 || (c == 0xf4 && d >= 0x90))) n = 0;
    } else if (n > 1) {
      n = 0;
    }
    if (n == 0) {
      s[i] = '?';
      n = 1;
    }
    i += n;
  }
  return s;
}

// Which of a few plausible values, or now and then anything.
std::string text(FuzzedDataProvider& in, std::initializer_list<const char*> usual, size_t max = 64) {
  const size_t pick = in.ConsumeIntegralInRange<size_t>(0, usual.size());
  if (pick < usual.size()) return *(usual.begin() + pick);
  return utf8(in.ConsumeRandomLengthString(max));
}
// Mostly in [lo, hi]; else a type's extreme (where sums overflow), or anything.
template <typename T>
T number(FuzzedDataProvider& in, T lo, T hi) {
  switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0: return in.ConsumeBool() ? std::numeric_limits<T>::max() : std::numeric_limits<T>::min();
    case 1: return in.ConsumeIntegral<T>();
    default: return in.ConsumeIntegralInRange<T>(lo, hi);
  }
}
double real(FuzzedDataProvider& in) {
  return in.ConsumeBool() ? in.ConsumeFloatingPointInRange<double>(0, 10) : in.ConsumeFloatingPoint<double>();
}

// One parked call: answered once.
struct Parked {
  const char* call;
  int answers = 0;
};

struct Agent {
  std::string host;
  std::string agent_id;
  std::optional<ddp::Assignment> assignment;  // of the latest generation it joined
  std::unique_ptr<ddp::WorkerHealthBoard> board;
  // While time passes: the agent heartbeats (it is up), and its workers
  // repeat their last heartbeats (they are alive, whether or not they progress).
  bool beating = true;
  bool workers_beating = true;
};

class Harness {
 public:
  explicit Harness(FuzzedDataProvider& in)
      : in_(in), coordinator_(clock_, ids_) {
    config_.nnodes = in_.ConsumeIntegralInRange(1, kAgents);
    config_.nproc = in_.ConsumeIntegralInRange(1, 4);
    config_.min_nnodes = in_.ConsumeIntegralInRange(0, config_.nnodes);
    config_.max_restarts = in_.ConsumeIntegralInRange(0, 3);
    config_.max_node_failures = in_.ConsumeIntegralInRange(0, 2);
    config_.grow = in_.ConsumeBool() ? ddp::JobConfig::Grow::kNow : ddp::JobConfig::Grow::kAtRestart;
    config_.node_timeout = std::chrono::seconds(in_.ConsumeIntegralInRange(1, 30));
    config_.heartbeat_interval = std::chrono::milliseconds(in_.ConsumeIntegralInRange(100, 5000));
    config_.hang_timeout = std::chrono::seconds(in_.ConsumeIntegralInRange(1, 600));
    config_.last_call_timeout = std::chrono::seconds(in_.ConsumeIntegralInRange(1, 60));
    config_.endpoints = in_.ConsumeIntegralInRange(1, 3);
    config_.epoch = in_.ConsumeIntegralInRange(0, config_.endpoints - 1);
    embedded_ = in_.ConsumeBool();
    if (embedded_) coordinator_.create_job(kJob, kToken, config_);
    for (int a = 0; a < kAgents; ++a) {
      agents_[a].host = "node" + std::to_string(a);
      agents_[a].agent_id = in_.ConsumeBool() ? "agent-" + std::to_string(a) : "";
      // The board answers for an unanswering worker by pid: not from /proc
      // here, and no process is signalled for its stacks.
      agents_[a].board = std::make_unique<ddp::WorkerHealthBoard>(
          clock_, ddp::stack_answer_timeout(config_.heartbeat_interval),
          [](int pid) { return "process " + std::to_string(pid) + " did not answer"; },
          [](int) -> std::optional<std::vector<ddp::ThreadStack>> { return std::nullopt; });
    }
  }

  void run() {
    for (int call = 0; call < kMaxCalls && in_.remaining_bytes() > 0; ++call) step();
    // Shutting down answers every parked call.
    coordinator_.abort_all();
    for (const auto& p : parked_) {
      if (p->answers != 1) std::fprintf(stderr, "%s answered %d times\n", p->call, p->answers);
      FUZZ_CHECK(p->answers == 1);
    }
  }

 private:
  std::shared_ptr<Parked> park(const char* call) {
    parked_.push_back(std::make_shared<Parked>(Parked{call}));
    return parked_.back();
  }

  // CoordinatorService::job_for: the caller's job, or null (refused).
  std::shared_ptr<ddp::CoordinatorJob> job_for() {
    std::shared_ptr<ddp::CoordinatorJob> job;
    const bool right = in_.ConsumeIntegralInRange(0, 15) != 0;
    // Rarely another epoch: a later one ends the job here (it was taken over).
    const int epoch = in_.ConsumeIntegralInRange(0, 63) != 0 ? config_.epoch : number(in_, -1, 3);
    const ddp::Status s = coordinator_.find(right ? kJob : "job-2", right ? kToken : "guess", job, epoch);
    FUZZ_CHECK(s.ok() == (job != nullptr));
    if (!right) FUZZ_CHECK(!s.ok());
    return job;
  }

  // CoordinatorService's millis().
  static Duration millis(int64_t ms) { return ddp::call_wait(ms); }

  Agent& agent() { return agents_[in_.ConsumeIntegralInRange(0, kAgents - 1)]; }

  int64_t generation_for(const Agent& a) {
    if (in_.ConsumeIntegralInRange(0, 7) != 0) {
      if (a.assignment) return a.assignment->generation;
      if (job_) return job_->current_view().generation;
    }
    return number<int64_t>(in_, -1, 4);
  }

  // Heartbeats weigh most: a verdict (stuck collective, desync, straggler)
  // takes several of them from several ranks.
  void step() {
    switch (in_.ConsumeIntegralInRange(0, 23)) {
      case 0: case 1: join(); break;
      case 2: case 3: case 4: case 5: worker_heartbeat(); break;
      case 6: case 7: case 8: agent_heartbeat(); break;
      case 9: report_outcome(); break;
      case 10: watch(); break;
      case 11: kv_set(); break;
      case 12: kv_get(); break;
      case 13: kv_add(); break;
      case 14: kv_compare_set(); break;
      case 15: kv_delete_prefix(); break;
      case 16: kv_wait_or_barrier(); break;
      case 17: nccl_id(); break;
      case 18: status(); break;
      case 19: stacks_or_stop(); break;
      case 20: check_epoch(); break;
      case 21: {
        Agent& a = agent();
        (in_.ConsumeBool() ? a.beating : a.workers_beating) ^= true;
        break;
      }
      default: advance(); break;
    }
  }

  // --- Join ---------------------------------------------------------------

  void join() {
    Agent& a = agent();
    const int index = static_cast<int>(&a - agents_);
    const std::string host = in_.ConsumeIntegralInRange(0, 15) != 0 ? a.host : utf8(in_.ConsumeRandomLengthString(300));
    const bool plausible = in_.ConsumeIntegralInRange(0, 7) != 0;
    const int nnodes = plausible ? config_.nnodes : number(in_, 0, kAgents);
    const int nproc = plausible ? config_.nproc : number(in_, 0, 4);
    const int min_nnodes = plausible ? config_.min_nnodes : number(in_, -1, kAgents);
    const int64_t last_call_ms = plausible ? 0 : number<int64_t>(in_, -1, 60000);
    const std::string grow = plausible ? "" : text(in_, {"now", "restart"});
    // The service's checks.
    if (host.size() > Limits::kMaxIdBytes) return;
    if (nnodes < 1 || nnodes > Limits::kMaxNodes || nproc < 1 || nproc > Limits::kMaxNproc || min_nnodes < 0 ||
        min_nnodes > nnodes || last_call_ms < 0) {
      return;
    }
    ddp::JobConfig view;
    view.nnodes = nnodes;
    view.min_nnodes = min_nnodes;
    if (last_call_ms > 0) view.last_call_timeout = millis(last_call_ms);
    view.nproc = nproc;
    view.max_restarts = config_.max_restarts;
    view.max_node_failures = config_.max_node_failures;
    view.epoch = config_.epoch;
    view.endpoints = config_.endpoints;
    view.hang_timeout = config_.hang_timeout;
    view.heartbeat_interval = config_.heartbeat_interval;
    view.node_timeout = config_.node_timeout;
    view.grow = config_.grow;
    if (!grow.empty()) {
      const std::optional<ddp::JobConfig::Grow> g = ddp::parse_grow_policy(grow);
      if (!g) return;
      view.grow = *g;
    }
    std::shared_ptr<ddp::CoordinatorJob> job;
    if (!coordinator_.find_for_join(kJob, kToken, view, job, config_.epoch).ok()) return;
    job_ = job;
    jobs_seen_.insert(job);  // kept: a standalone coordinator may forget it and make another
    ddp::JoinParams params;
    params.host = host;
    params.agent_id = a.agent_id;
    params.nproc = nproc;
    params.node_rank = in_.ConsumeBool() ? -1 : number(in_, -1, kAgents);
    params.nnodes = nnodes;
    params.min_nnodes = min_nnodes;
    params.generation = generation_for(a);
    params.master_port = 29500;
    params.hosts_coordinator = index == 0;
    const Duration timeout = millis(number<int64_t>(in_, 0, 120000));
    const std::shared_ptr<Parked> parked = park("join");
    const ddp::CoordinatorJob* id = job.get();
    job->join(params, timeout, [this, parked, index, nproc, id](const ddp::Status& s, const ddp::Assignment& got) {
      ++parked->answers;
      if (!s.ok()) return;
      FUZZ_CHECK(got.nnodes >= 1 && got.node_rank >= 0 && got.node_rank < got.nnodes);
      FUZZ_CHECK(got.world_size == got.nnodes * nproc && got.rank_start == got.node_rank * nproc);
      FUZZ_CHECK(got.generation >= 0);
      auto& world = worlds_[{id, got.generation}];
      for (const auto& [other, assignment] : world) {
        if (other == index) continue;
        FUZZ_CHECK(assignment.node_rank != got.node_rank);
        FUZZ_CHECK(assignment.nnodes == got.nnodes && assignment.master_addr == got.master_addr);
      }
      world[index] = got;
      Agent& agent = agents_[index];
      agent.assignment = got;
      agent.board->clear();  // a new generation: the agent forgets its workers
    });
  }

  // --- Heartbeats ---------------------------------------------------------

  void fill_collective(pb::CollectiveRecord& c) {
    // Few sequence numbers: ranks meet in the same collectives (or desync there).
    c.set_sequence(in_.ConsumeIntegralInRange(0, 7) != 0 ? in_.ConsumeIntegralInRange<uint64_t>(1, 4)
                                                         : in_.ConsumeIntegral<uint64_t>());
    c.set_op(text(in_, {"all_reduce", "broadcast", "all_gather", "unknown", ""}));
    c.set_bytes(number<int64_t>(in_, 0, 1 << 20));
    c.set_dtype(text(in_, {"float32", "float16", ""}));
    c.set_state(text(in_, {"enqueued", "started", "completed", "failed"}));
    c.set_age_ms(number<int64_t>(in_, 0, 600000));
  }

  void fill_stacks(pb::RankStacks& s) {
    s.set_language(text(in_, {"c++", "python"}));
    if (in_.ConsumeBool()) s.set_note(utf8(in_.ConsumeRandomLengthString(64)));
    const int threads = in_.ConsumeIntegralInRange(0, 2);
    for (int t = 0; t < threads; ++t) {
      pb::ThreadStack* thread = s.add_threads();
      thread->set_name(text(in_, {"MainThread", "thread 2"}));
      thread->set_main(in_.ConsumeBool());
      const int frames = in_.ConsumeIntegralInRange(0, 4);
      for (int f = 0; f < frames; ++f) {
        pb::StackFrame* frame = thread->add_frames();
        frame->set_function(text(in_, {"train_step", "ddp::Reducer::wait", "all_reduce", ""}));
        frame->set_file(text(in_, {"train.py", "/usr/lib/python3/dist-packages/torch/nn/module.py", "libc.so.6", ""}));
        frame->set_line(number(in_, 0, 500));
        frame->set_code(text(in_, {"loss.backward()", ""}));
      }
    }
  }

  // A worker's heartbeat to its agent (LocalAgentService::Heartbeat).
  void worker_heartbeat() {
    Agent& a = agent();
    if (!a.assignment) return;
    const ddp::Assignment& layout = *a.assignment;
    pb::WorkerHeartbeatRequest req;
    pb::WorkerHeartbeat& hb = *req.mutable_heartbeat();
    const int nproc = layout.world_size / layout.nnodes;
    hb.set_rank(in_.ConsumeIntegralInRange(0, 15) != 0 ? layout.rank_start + in_.ConsumeIntegralInRange(0, nproc - 1)
                                                        : in_.ConsumeIntegral<int32_t>());
    hb.set_local_rank(static_cast<int32_t>(int64_t{hb.rank()} - layout.rank_start));
    hb.set_pid(number(in_, 1, 100000));
    hb.set_generation(in_.ConsumeIntegralInRange(0, 15) != 0 ? layout.generation : in_.ConsumeIntegral<int64_t>());
    hb.set_step(number<int64_t>(in_, -1, 3));
    hb.set_phase(text(in_, {"data", "forward", "backward", "optimizer", "checkpoint", "collective", "other"}));
    hb.set_step_seconds(real(in_));
    hb.set_busy_seconds(real(in_));
    hb.set_last_enqueued(number<uint64_t>(in_, 0, 4));
    hb.set_last_started(number<uint64_t>(in_, 0, 4));
    hb.set_last_completed(number<uint64_t>(in_, 0, 4));
    hb.set_exiting(in_.ConsumeIntegralInRange(0, 7) == 0);
    const int recent = in_.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < recent; ++i) fill_collective(*hb.add_recent());
    if (in_.ConsumeIntegralInRange(0, 3) == 0) fill_stacks(*req.mutable_stacks());

    if (hb.generation() != layout.generation) return;  // a previous generation's worker: ignored
    a.board->record(ddp::from_proto(hb, layout.node_rank, a.host));
    if (req.has_stacks()) {
      ddp::RankStacks stacks = ddp::from_proto(req.stacks());
      stacks.rank = hb.rank();
      a.board->record_stacks(std::move(stacks));
    }
    a.board->take_stack_dump_request(hb.rank());
  }

  static bool same_report(const ddp::RankReport& x, const ddp::RankReport& y) {
    if (x.recent.size() != y.recent.size()) return false;
    for (size_t i = 0; i < x.recent.size(); ++i) {
      const ddp::CollectiveSeen &c = x.recent[i], &d = y.recent[i];
      if (c.sequence != d.sequence || c.op != d.op || c.bytes != d.bytes || c.dtype != d.dtype ||
          c.state != d.state || c.age != d.age) {
        return false;
      }
    }
    const auto same_double = [](double u, double v) { return u == v || (u != u && v != v); };
    return x.rank == y.rank && x.node_rank == y.node_rank && x.local_rank == y.local_rank && x.host == y.host &&
           x.pid == y.pid && x.step == y.step && x.phase == y.phase && same_double(x.step_seconds, y.step_seconds) &&
           same_double(x.busy_seconds, y.busy_seconds) && x.last_enqueued == y.last_enqueued &&
           x.last_started == y.last_started && x.last_completed == y.last_completed && x.exiting == y.exiting;
  }

  // An agent's heartbeat to the coordinator, with fuzzed fields: its node
  // rank and generation, and now and then a worker's report only a
  // misbehaving agent would send.
  void agent_heartbeat() {
    Agent& a = agent();
    const int node_rank = a.assignment && in_.ConsumeIntegralInRange(0, 15) != 0 ? a.assignment->node_rank
                                                                                : number(in_, -1, kAgents);
    const int64_t generation = generation_for(a);
    std::optional<pb::WorkerHeartbeat> extra;
    if (in_.ConsumeIntegralInRange(0, 7) == 0) {
      pb::WorkerHeartbeat& hb = extra.emplace();
      hb.set_rank(number(in_, 0, 16));
      hb.set_step(number<int64_t>(in_, -1, 3));
      hb.set_step_seconds(in_.ConsumeFloatingPoint<double>());
      hb.set_held_ms(number<int64_t>(in_, 0, 1000));
      hb.set_last_enqueued(number<uint64_t>(in_, 0, 4));
      fill_collective(*hb.add_recent());
    }
    if (std::shared_ptr<ddp::CoordinatorJob> job = job_for()) forward(a, *job, node_rank, generation, extra);
  }

  // CoordinatorClient::heartbeat builds the request from the agent's board,
  // CoordinatorService::AgentHeartbeat converts it back, and the answer's
  // requests for stacks go to the board.
  void forward(Agent& a, ddp::CoordinatorJob& job, int node_rank, int64_t generation,
               const std::optional<pb::WorkerHeartbeat>& extra = std::nullopt) {
    pb::AgentHeartbeatRequest req;
    req.set_node_rank(node_rank);
    req.set_generation(generation);
    const std::vector<ddp::ForwardedReport> latest = a.board->latest();
    for (const ddp::ForwardedReport& w : latest) {
      ddp::to_proto(w.report, w.held, *req.add_workers());
      if (req.host().empty()) req.set_host(w.report.host);
    }
    for (const ddp::RankStacks& s : a.board->take_stacks()) ddp::to_proto(s, *req.add_stacks());
    if (extra) *req.add_workers() = *extra;

    std::vector<ddp::ForwardedReport> workers;
    for (const pb::WorkerHeartbeat& w : req.workers()) {
      workers.push_back({ddp::from_proto(w, req.node_rank(), req.host()), ddp::heartbeat_age(w.held_ms())});
    }
    // What the board forwarded comes through unchanged (but for the node
    // rank, the agent's word).
    for (size_t i = 0; i < latest.size(); ++i) {
      ddp::RankReport sent = latest[i].report;
      sent.node_rank = req.node_rank();
      FUZZ_CHECK(same_report(workers[i].report, sent));
    }
    std::vector<ddp::RankStacks> stacks;
    for (const pb::RankStacks& s : req.stacks()) stacks.push_back(ddp::from_proto(s));
    std::vector<int> dump;
    std::optional<ddp::JobStop> stop;
    int64_t current = -1;
    const ddp::Status s =
        job.heartbeat(req.node_rank(), req.generation(), current, workers, &dump, std::move(stacks), &stop);
    if (!s.ok()) return;
    FUZZ_CHECK(current == job.current_view().generation);
    const std::set<int> unique(dump.begin(), dump.end());
    FUZZ_CHECK(unique.size() == dump.size());
    // The job's shape is its first joiner's (standalone), not necessarily config_'s.
    const int nproc = job.config().nproc;
    for (int rank : dump) FUZZ_CHECK(rank >= req.node_rank() * nproc && rank < (req.node_rank() + 1) * nproc);
    if (stop) {
      FUZZ_CHECK(!stop->stop_at_step || *stop->stop_at_step >= 0);
      pb::JobStop wire;
      ddp::to_proto(*stop, wire);
      const ddp::JobStop heard = ddp::from_proto(wire);
      FUZZ_CHECK(heard.stop_at_step == stop->stop_at_step && heard.reason == stop->reason);
    }
    a.board->request_stack_dumps(dump);
  }

  // --- Outcomes and watches -----------------------------------------------

  void report_outcome() {
    Agent& a = agent();
    ddp::NodeOutcome o;
    o.node_rank = a.assignment && in_.ConsumeIntegralInRange(0, 7) != 0 ? a.assignment->node_rank
                                                                       : number(in_, -1, kAgents);
    o.success = in_.ConsumeBool();
    o.stopped = in_.ConsumeBool();
    o.exit_code = number(in_, 0, 255);
    o.failed_rank = number(in_, -1, 16);
    o.description = utf8(in_.ConsumeRandomLengthString(64)).substr(0, Limits::kMaxKeyBytes);
    o.leaving = in_.ConsumeIntegralInRange(0, 7) == 0;
    const int64_t generation = generation_for(a);
    if (std::shared_ptr<ddp::CoordinatorJob> job = job_for()) job->report_outcome(generation, o);
  }

  void watch() {
    Agent& a = agent();
    const int node_rank = in_.ConsumeIntegralInRange(0, 7) == 0 ? -1
                          : a.assignment && in_.ConsumeBool() ? a.assignment->node_rank
                                                              : number(in_, -1, kAgents);
    const int64_t generation = generation_for(a);
    // from_pb(): unknown enum values read as RUNNING.
    const int known_pb = number(in_, 0, 4);
    const ddp::GenerationState known = known_pb == 2   ? ddp::GenerationState::kStopping
                                       : known_pb == 3 ? ddp::GenerationState::kRestarting
                                       : known_pb == 4 ? ddp::GenerationState::kFinished
                                                       : ddp::GenerationState::kRunning;
    // The service waits at most 30 s, less when the caller's deadline is nearer.
    const Duration wait = std::chrono::milliseconds(in_.ConsumeIntegralInRange(0, 30000));
    std::shared_ptr<ddp::CoordinatorJob> job = job_for();
    if (!job) return;
    const std::shared_ptr<Parked> parked = park("watch");
    job->watch(node_rank, generation, known, wait,
               [parked, generation](const ddp::Status& s, const ddp::GenerationView& v) {
                 ++parked->answers;
                 if (s.ok()) FUZZ_CHECK(v.generation == generation);
               });
  }

  // --- KV store, barriers, NCCL IDs ---------------------------------------

  std::string key() {
    if (in_.ConsumeIntegralInRange(0, 15) == 0) return utf8(in_.ConsumeRandomLengthString(Limits::kMaxKeyBytes + 8));
    return "k/" + std::to_string(in_.ConsumeIntegralInRange(0, 5));
  }
  std::string value() {
    switch (in_.ConsumeIntegralInRange(0, 3)) {
      case 0: return std::to_string(number<int64_t>(in_, -5, 5));
      case 1: return std::to_string(in_.ConsumeIntegral<int64_t>());
      default: return in_.ConsumeRandomLengthString(32);  // bytes fields: anything
    }
  }

  // The model of the running generation's KV store: the job clears its store
  // whenever its generation ends, which is when generation or state moves.
  std::map<std::string, std::string>& model(const std::shared_ptr<ddp::CoordinatorJob>& job) {
    const ddp::GenerationView v = job->current_view();
    if (job != model_job_ || v.generation != model_generation_ || v.state == ddp::GenerationState::kFinished ||
        model_state_ == ddp::GenerationState::kFinished) {
      model_.clear();
      model_job_ = job;
      model_generation_ = v.generation;
    }
    model_state_ = v.state;
    return model_;
  }

  // The call's generation, and whether the job will take it.
  struct Target {
    std::shared_ptr<ddp::CoordinatorJob> job;
    int64_t generation = 0;
    bool accepted = false;
  };
  Target target() {
    Target t;
    Agent& a = agent();
    t.generation = generation_for(a);
    t.job = job_for();
    if (t.job) {
      const ddp::GenerationView v = t.job->current_view();
      t.accepted = v.generation == t.generation && v.state != ddp::GenerationState::kFinished;
    }
    return t;
  }

  void kv_set() {
    const std::string k = key(), v = value();
    Target t = target();
    if (!t.job || k.size() > Limits::kMaxKeyBytes || v.size() > Limits::kMaxValueBytes) return;
    auto& m = model(t.job);
    const ddp::Status s = t.job->kv_set(t.generation, k, v);
    FUZZ_CHECK(s.ok() == t.accepted);
    if (s.ok()) m[k] = v;
  }

  void kv_get() {
    const std::string k = key();
    Target t = target();
    if (!t.job || k.size() > Limits::kMaxKeyBytes) return;
    auto& m = model(t.job);
    std::optional<std::string> got;
    const ddp::Status s = t.job->kv_get(t.generation, k, got);
    FUZZ_CHECK(s.ok() == t.accepted);
    if (!s.ok() || k.rfind("k/", 0) != 0) return;
    const auto it = m.find(k);
    FUZZ_CHECK(got.has_value() == (it != m.end()));
    if (got) FUZZ_CHECK(*got == it->second);
  }

  static std::optional<int64_t> as_integer(const std::string& text) {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return v;
  }

  void kv_add() {
    const std::string k = key();
    const int64_t delta = number<int64_t>(in_, -3, 3);
    Target t = target();
    if (!t.job || k.size() > Limits::kMaxKeyBytes) return;
    auto& m = model(t.job);
    int64_t result = 0;
    const ddp::Status s = t.job->kv_add(t.generation, k, delta, result);
    if (!t.accepted) {
      FUZZ_CHECK(!s.ok());
      return;
    }
    if (k.rfind("k/", 0) != 0) return;
    const auto it = m.find(k);
    const std::optional<int64_t> before = it == m.end() ? std::optional<int64_t>(0) : as_integer(it->second);
    int64_t sum = 0;
    const bool fits = before && !__builtin_add_overflow(*before, delta, &sum);
    FUZZ_CHECK(s.ok() == fits);
    if (!s.ok()) return;
    FUZZ_CHECK(result == sum);
    m[k] = std::to_string(sum);
  }

  void kv_compare_set() {
    const std::string k = key();
    const bool expect_absent = in_.ConsumeBool();
    const std::string expected = value(), desired = value();
    Target t = target();
    if (!t.job || k.size() > Limits::kMaxKeyBytes || desired.size() > Limits::kMaxValueBytes) return;
    auto& m = model(t.job);
    bool swapped = false;
    std::string current;
    const ddp::Status s = t.job->kv_compare_set(
        t.generation, k, expect_absent ? std::nullopt : std::optional<std::string>(expected), desired, swapped, current);
    FUZZ_CHECK(s.ok() == t.accepted);
    if (!s.ok() || k.rfind("k/", 0) != 0) return;
    const auto it = m.find(k);
    const bool matches = expect_absent ? it == m.end() : it != m.end() && it->second == expected;
    FUZZ_CHECK(swapped == matches);
    if (matches) m[k] = desired;
    FUZZ_CHECK(current == (m.count(k) ? m[k] : std::string()));
  }

  void kv_delete_prefix() {
    const std::string prefix = in_.ConsumeBool() ? "k/" : key();
    Target t = target();
    if (!t.job || prefix.size() > Limits::kMaxKeyBytes) return;
    auto& m = model(t.job);
    int64_t deleted = -1;
    const ddp::Status s = t.job->kv_delete_prefix(t.generation, prefix, deleted);
    FUZZ_CHECK(s.ok() == t.accepted);
    if (!s.ok()) return;
    int64_t expected = 0;
    for (auto it = m.begin(); it != m.end();) {
      if (it->first.rfind(prefix, 0) == 0) {
        it = m.erase(it);
        ++expected;
      } else {
        ++it;
      }
    }
    // Barrier keys and keys outside the model may match a prefix too.
    FUZZ_CHECK(deleted >= expected);
    if (prefix.rfind("k/", 0) == 0) FUZZ_CHECK(deleted == expected);
  }

  void kv_wait_or_barrier() {
    const bool barrier = in_.ConsumeBool();
    std::vector<std::string> keys;
    const int n = in_.ConsumeIntegralInRange(0, 3);
    for (int i = 0; i < n; ++i) keys.push_back(key());
    const std::string name = "b" + std::to_string(in_.ConsumeIntegralInRange(0, 3));
    const int participants = number(in_, 1, 4);
    const Duration timeout = millis(number<int64_t>(in_, 0, 60000));
    Target t = target();
    if (!t.job) return;
    const std::shared_ptr<Parked> parked = park(barrier ? "barrier" : "kv_wait");
    auto done = [parked](const ddp::Status&) { ++parked->answers; };
    if (barrier) {
      t.job->barrier(t.generation, name, participants, timeout, done);
    } else {
      t.job->kv_wait(t.generation, std::move(keys), timeout, done);
    }
  }

  void nccl_id() {
    const std::string comm = in_.ConsumeBool() ? "default" : utf8(in_.ConsumeRandomLengthString(300));
    Target t = target();
    if (!t.job || comm.size() > Limits::kMaxIdBytes) return;
    std::string id;
    const ddp::Status s = t.job->nccl_id(t.generation, comm, id);
    FUZZ_CHECK(s.ok() == t.accepted);
    if (!s.ok()) return;
    FUZZ_CHECK(id.size() == ddp::kUniqueIdBytes);
    jobs_seen_.insert(t.job);
    const auto [it, inserted] = nccl_ids_.try_emplace({t.job.get(), t.generation, comm}, id);
    FUZZ_CHECK(it->second == id);
  }

  // --- Status, stacks, stop, epochs, time ---------------------------------

  void status() {
    std::shared_ptr<ddp::CoordinatorJob> job = job_for();
    if (!job) return;
    const nlohmann::json j = nlohmann::json::parse(job->status_json(), nullptr, /*allow_exceptions=*/false);
    FUZZ_CHECK(j.is_object() && j.value("job_id", "") == kJob);
    FUZZ_CHECK(j["generation"] == job->current_view().generation);
  }

  void stacks_or_stop() {
    Agent& a = agent();
    if (in_.ConsumeBool()) {
      const int64_t wait_ms = std::clamp<int64_t>(in_.ConsumeIntegral<int64_t>(), 100, 60000);
      std::shared_ptr<ddp::CoordinatorJob> job = job_for();
      if (!job) return;
      const std::shared_ptr<Parked> parked = park("collect_stacks");
      job->collect_stacks(std::chrono::milliseconds(wait_ms), [parked](const ddp::Status& s, const std::string& j) {
        ++parked->answers;
        if (s.ok()) FUZZ_CHECK(nlohmann::json::accept(j));
      });
      return;
    }
    const int node_rank = a.assignment ? a.assignment->node_rank : number(in_, -1, kAgents);
    const int64_t generation = generation_for(a);
    const std::string reason = utf8(in_.ConsumeRandomLengthString(64)).substr(0, Limits::kMaxKeyBytes);
    const int64_t timeout_ms = std::clamp<int64_t>(in_.ConsumeIntegral<int64_t>(), 0, int64_t{24} * 3600 * 1000);
    std::shared_ptr<ddp::CoordinatorJob> job = job_for();
    if (!job) return;
    ddp::JobStop stop;
    if (!job->request_stop(node_rank, generation, reason, std::chrono::milliseconds(timeout_ms), stop).ok()) return;
    FUZZ_CHECK(!stop.stop_at_step || *stop.stop_at_step >= 0);
  }

  void check_epoch() {
    std::shared_ptr<ddp::CoordinatorJob> job = job_for();
    if (!job) return;
    const int epoch = number(in_, 0, 3);
    const ddp::Status s = job->check_epoch(epoch);
    FUZZ_CHECK(s.ok() == (epoch <= config_.epoch));
    if (!s.ok()) FUZZ_CHECK(job->finished());
  }

  // Time passes as the coordinator's timer sees it (it ticks every 100 ms):
  // here a tick at least every 5 s, and twice per node timeout. Meanwhile
  // the agents that are up heartbeat, and their live workers repeat their
  // last heartbeats, as they would; past a minute the clock runs on without
  // them (a long gap: every node is lost). A finished job
  // is forgotten 10 minutes on, by when every call parked on it has been
  // answered at its deadline.
  void advance() {
    static constexpr int64_t kSteps_ms[] = {0, 100, 1000, 5000, 31000, 301000};
    const size_t pick = in_.ConsumeIntegralInRange<size_t>(0, std::size(kSteps_ms));
    int64_t ms = pick < std::size(kSteps_ms) ? kSteps_ms[pick] : in_.ConsumeIntegralInRange<int64_t>(0, 1200000);
    const int64_t beat_ms =
        std::clamp<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(config_.node_timeout).count() / 2,
                            500, 5000);
    int64_t passed = 0;
    do {
      const bool beating = passed < 60000;
      const int64_t step = std::min(ms, beating ? beat_ms : 5000);
      clock_.advance(std::chrono::milliseconds(step));
      ms -= step;
      passed += step;
      if (beating) beat();
      coordinator_.tick();
    } while (ms > 0);
  }

  void beat() {
    std::shared_ptr<ddp::CoordinatorJob> job;
    if (!coordinator_.find(kJob, kToken, job, config_.epoch).ok()) return;
    for (Agent& a : agents_) {
      if (!a.assignment) continue;
      if (a.workers_beating) {
        for (const ddp::ForwardedReport& w : a.board->latest()) a.board->record(w.report);
      }
      if (a.beating) forward(a, *job, a.assignment->node_rank, a.assignment->generation);
    }
  }

  FuzzedDataProvider& in_;
  ddp::FakeClock clock_;
  CountingIds ids_;
  ddp::Coordinator coordinator_;
  ddp::JobConfig config_;
  bool embedded_ = false;
  Agent agents_[kAgents];
  std::shared_ptr<ddp::CoordinatorJob> job_;  // the job as last joined (standalone: may be forgotten)
  std::vector<std::shared_ptr<Parked>> parked_;
  std::set<std::shared_ptr<ddp::CoordinatorJob>> jobs_seen_;  // alive, so that their addresses stay theirs
  std::map<std::pair<const ddp::CoordinatorJob*, int64_t>, std::map<int, ddp::Assignment>> worlds_;  // by job and
                                                                                                    // generation, by agent
  std::map<std::string, std::string> model_;
  int64_t model_generation_ = -1;
  ddp::GenerationState model_state_ = ddp::GenerationState::kRunning;
  std::shared_ptr<ddp::CoordinatorJob> model_job_;
  std::map<std::tuple<const ddp::CoordinatorJob*, int64_t, std::string>, std::string> nccl_ids_;
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The job logs every verdict and refusal: not wanted for every input.
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  Harness h(in);
  h.run();
  return 0;
}
