#include "agent/worker_health_board.h"

#include <algorithm>

#include "stacks/process_state.h"
#include "stacks/python_signal_stacks.h"

namespace ddp {

WorkerHealthBoard::WorkerHealthBoard(const Clock& clock, Duration answer_timeout, ProcessDescriber describe,
                                     SignalStackReader read_by_signal)
    : clock_(clock),
      answer_timeout_(answer_timeout),
      describe_(describe ? std::move(describe) : ProcessDescriber(describe_unanswering_process)),
      read_by_signal_(read_by_signal ? std::move(read_by_signal) : SignalStackReader([](int pid) {
        return python_stacks_by_signal(pid, std::chrono::milliseconds(300));
      })) {}

void WorkerHealthBoard::record(RankReport report) {
  std::lock_guard<std::mutex> lock(mutex_);
  const int rank = report.rank;
  latest_[rank] = {std::move(report), clock_.now()};
}

void WorkerHealthBoard::attach_announcements(int rank, std::shared_ptr<const CollectiveAnnouncements> announcements) {
  std::lock_guard<std::mutex> lock(mutex_);
  announcements_[rank] = std::move(announcements);
}

namespace {

// The entry of `group` in the report's subgroups, added (members unknown
// until a heartbeat names them) where the report has none.
SubgroupProgress& subgroup_entry(RankReport& r, const std::string& group, uint64_t sequence) {
  for (SubgroupProgress& g : r.subgroups) {
    if (g.group == group) return g;
  }
  SubgroupProgress& g = r.subgroups.emplace_back();
  g.group = group;
  g.last_enqueued = g.last_completed = sequence - 1;
  return g;
}

// Adds to `forwarded` the collectives its rank announced after its report
// was made (newer than anything the report has): on the default group to
// its recent record, on another group to that group's recent record and,
// while its call runs, as its open collective. One still running puts the
// rank in phase collective; ones that returned leave the report's phase
// (the rank went on to something else since). The newest of them then
// dates the report, so every age is restated as of that moment.
void add_announced(const CollectiveAnnouncements& announcements, SteadyTime now, ForwardedReport& forwarded) {
  constexpr size_t kMaxRecent = 64;       // as many as a heartbeat carries at most
  constexpr size_t kMaxGroupRecent = 16;  // ... of a subgroup
  RankReport& r = forwarded.report;
  std::vector<AnnouncedCollective> added;
  for (AnnouncedCollective& c : announcements.since(r.announced, now)) {
    const uint64_t reported = c.group.empty() ? r.last_enqueued : subgroup_entry(r, c.group, c.sequence).last_enqueued;
    if (c.sequence <= reported) continue;  // the report has it already
    added.push_back(std::move(c));          // ages as of now, for the moment
  }
  if (added.empty()) return;
  const Duration held = std::min(forwarded.held, added.back().age);  // the rank was alive then
  const Duration older = forwarded.held - held;
  for (CollectiveSeen& c : r.recent) c.age += older;
  for (SubgroupProgress& g : r.subgroups) {
    if (g.open) g.open->age += older;
    for (CollectiveSeen& c : g.recent) c.age += older;
  }
  for (AnnouncedCollective& c : added) {
    c.age -= held;
    const bool returned = c.state == "completed";
    if (!returned) r.phase = WorkerPhase::kCollective;
    if (c.group.empty()) {
      // Completed up to it where nothing before it is still open.
      if (returned && r.last_completed >= r.last_enqueued) r.last_completed = c.sequence;
      r.last_enqueued = r.last_started = c.sequence;
      r.recent.push_back(std::move(c));
      continue;
    }
    // The one it entered last is the one it is in now, if its call still
    // runs: the report's open one (caught by a heartbeat made several
    // collectives ago) has returned since, unless it was asynchronous.
    SubgroupProgress& g = subgroup_entry(r, c.group, c.sequence);
    g.last_enqueued = std::max(g.last_enqueued, c.sequence);
    if (returned) {
      g.open.reset();
      g.last_completed = std::max(g.last_completed, c.sequence);
    } else {
      g.last_completed = std::min(g.last_completed, c.sequence - 1);
      g.open = static_cast<CollectiveSeen>(c);
    }
    g.recent.push_back(c);
    if (g.recent.size() > kMaxGroupRecent) g.recent.erase(g.recent.begin());
  }
  forwarded.held = held;
  if (r.recent.size() > kMaxRecent) r.recent.erase(r.recent.begin(), r.recent.end() - kMaxRecent);
}

}  // namespace

std::vector<ForwardedReport> WorkerHealthBoard::latest() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const SteadyTime now = clock_.now();
  std::vector<ForwardedReport> out;
  out.reserve(latest_.size());
  for (const auto& [rank, entry] : latest_) {
    ForwardedReport forwarded{entry.first, now - entry.second};
    if (auto a = announcements_.find(rank); a != announcements_.end()) add_announced(*a->second, now, forwarded);
    out.push_back(std::move(forwarded));
  }
  return out;
}

void WorkerHealthBoard::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  latest_.clear();
  announcements_.clear();
  pids_.clear();
  dump_requests_.clear();
  answers_.clear();
  resources_.clear();
  ++cleared_;
}

void WorkerHealthBoard::set_resource_sampler(ResourceSampler sampler) {
  std::lock_guard<std::mutex> lock(mutex_);
  sampler_ = std::move(sampler);
}

void WorkerHealthBoard::sample_resources() {
  ResourceSampler sampler;
  std::map<int, int> pids;
  uint64_t cleared = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!sampler_ || pids_.empty()) return;
    sampler = sampler_;
    pids = pids_;
    cleared = cleared_;
  }
  // /proc and NVML are read without the lock held.
  std::map<int, RankResources> taken = sampler(pids);
  std::lock_guard<std::mutex> lock(mutex_);
  if (cleared != cleared_) return;  // a new generation began meanwhile
  const SteadyTime now = clock_.now();
  for (const auto& [rank, pid] : pids) {
    auto it = taken.find(rank);
    if (it != taken.end()) {
      resources_[rank] = {std::move(it->second), now};
    } else if (auto kept = resources_.find(rank); kept != resources_.end() && kept->second.first.pid == pid) {
      kept->second.first.process_gone = true;
    }
  }
}

std::map<int, RankResources> WorkerHealthBoard::resources() const {
  std::lock_guard<std::mutex> lock(mutex_);
  const SteadyTime now = clock_.now();
  std::map<int, RankResources> out;
  for (const auto& [rank, entry] : resources_) {
    RankResources r = entry.first;
    r.age = now - entry.second;
    out.emplace(rank, std::move(r));
  }
  return out;
}

std::vector<ForwardedReport> WorkerHealthBoard::latest_with_resources() const {
  std::vector<ForwardedReport> out = latest();
  std::map<int, RankResources> samples = resources();
  for (ForwardedReport& f : out) {
    auto it = samples.find(f.report.rank);
    if (it == samples.end()) continue;
    f.report.resources = std::move(it->second);
    samples.erase(it);
  }
  for (auto& [rank, r] : samples) {
    ForwardedReport f;
    f.report.rank = rank;
    f.report.pid = r.pid;
    f.report.resources_only = true;
    f.report.resources = std::move(r);
    out.push_back(std::move(f));
  }
  return out;
}

void WorkerHealthBoard::set_worker_pid(int rank, int pid) {
  std::lock_guard<std::mutex> lock(mutex_);
  pids_[rank] = pid;
}

void WorkerHealthBoard::request_stack_dumps(const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  const SteadyTime now = clock_.now();
  for (int rank : ranks) dump_requests_.emplace(rank, DumpRequest{now, false});
}

bool WorkerHealthBoard::take_stack_dump_request(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = dump_requests_.find(rank);
  if (it == dump_requests_.end() || it->second.delivered) return false;
  it->second.delivered = true;
  return true;
}

void WorkerHealthBoard::record_stacks(RankStacks stacks) {
  std::function<void()> listener;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (dump_requests_.erase(stacks.rank) == 0) return;
    answers_.push_back(std::move(stacks));
    listener = stacks_listener_;
  }
  if (listener) listener();
}

std::vector<RankStacks> WorkerHealthBoard::take_stacks() {
  std::vector<std::pair<int, int>> overdue;  // rank, pid (0: unknown)
  std::vector<RankStacks> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(answers_);
    const SteadyTime now = clock_.now();
    for (auto it = dump_requests_.begin(); it != dump_requests_.end();) {
      if (now - it->second.asked_at < answer_timeout_) {
        ++it;
        continue;
      }
      int pid = 0;
      if (auto p = pids_.find(it->first); p != pids_.end()) pid = p->second;
      if (auto r = latest_.find(it->first); pid == 0 && r != latest_.end()) pid = r->second.first.pid;
      overdue.emplace_back(it->first, pid);
      it = dump_requests_.erase(it);
    }
  }
  // /proc is read, and a Python rank signalled, without the lock held.
  for (const auto& [rank, pid] : overdue) {
    RankStacks note;
    note.rank = rank;
    note.language = "process";
    note.note = pid > 0 ? describe_(pid) : "did not answer, and its process is not known here";
    if (pid > 0) {
      if (std::optional<std::vector<ThreadStack>> threads = read_by_signal_(pid)) {
        note.language = "python";
        note.threads = std::move(*threads);
        note.note = "its companion did not answer (" + note.note + "); stacks by faulthandler on a signal";
      }
    }
    out.push_back(std::move(note));
  }
  return out;
}

void WorkerHealthBoard::set_stacks_listener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mutex_);
  stacks_listener_ = std::move(listener);
}

}  // namespace ddp
