#include "companion/companion_messages.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

#include "health/heartbeat_proto.h"

namespace ddp {
namespace {

using json = nlohmann::json;

// Caps on what one message may carry: more is cut, not refused.
constexpr size_t kMaxRecent = 64;
constexpr size_t kMaxGroupRecent = 16;
constexpr size_t kMaxSubgroups = 64;
constexpr size_t kMaxPeerWaits = 16;
constexpr size_t kMaxGroupRanks = 1 << 20;
constexpr size_t kMaxThreads = 64;
constexpr size_t kMaxFrames = 256;
constexpr size_t kMaxText = 4096;
// Ages beyond this are clamped: a larger count of milliseconds would overflow
// Duration's nanoseconds (1e12 ms is 1e9 s, as seconds_field allows).
constexpr int64_t kMaxAgeMs = 1'000'000'000'000;

std::optional<json> parse_object(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  return j;
}

std::string text_field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return {};
  std::string s = it->get<std::string>();
  if (s.size() > kMaxText) {
    // Cut between characters, not inside one: the text goes on into protobuf
    // strings and JSON, which refuse invalid UTF-8 (nlohmann checked the input).
    size_t n = kMaxText;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80) --n;
    s.resize(n);
  }
  return s;
}

int64_t int_field(const json& j, const char* key, int64_t fallback) {
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? fallback : static_cast<int64_t>(v);
  }
  return fallback;
}

uint64_t sequence_field(const json& j, const char* key) { return static_cast<uint64_t>(std::max<int64_t>(int_field(j, key, 0), 0)); }

double seconds_field(const json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return 0;
  const double v = it->get<double>();
  return v >= 0 && v < 1e9 ? v : 0;
}

bool bool_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_boolean() && it->get<bool>();
}

int int32_field(const json& j, const char* key, int fallback) {
  const int64_t v = int_field(j, key, fallback);
  return v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max() ? fallback : static_cast<int>(v);
}

CollectiveSeen collective_field(const json& c) {
  CollectiveSeen seen;
  seen.sequence = sequence_field(c, "sequence");
  seen.op = text_field(c, "op");
  seen.bytes = std::max<int64_t>(int_field(c, "bytes", 0), 0);
  seen.dtype = text_field(c, "dtype");
  seen.state = text_field(c, "state");
  seen.age = std::chrono::milliseconds(std::clamp<int64_t>(int_field(c, "age_ms", 0), 0, kMaxAgeMs));
  return seen;
}

/// Calls visit(object) for each object among the last `most` elements of
/// `j`'s array `key`, oldest first: where a list is too long, its newest
/// entries matter.
template <typename Visit>
void for_newest_objects(const json& j, const char* key, size_t most, Visit visit) {
  const auto list = j.find(key);
  if (list == j.end() || !list->is_array()) return;
  for (size_t i = list->size() > most ? list->size() - most : 0; i < list->size(); ++i) {
    if ((*list)[i].is_object()) visit((*list)[i]);
  }
}

/// The collectives in `j`'s "recent", oldest first.
std::vector<CollectiveSeen> recent_field(const json& j, size_t most) {
  std::vector<CollectiveSeen> out;
  for_newest_objects(j, "recent", most, [&](const json& c) { out.push_back(collective_field(c)); });
  return out;
}

/// The heartbeat's "groups" (the companion's subgroups.py): the newest are
/// kept where there are too many; a group without members is left out.
std::vector<SubgroupProgress> subgroups_field(const json& j) {
  std::vector<SubgroupProgress> out;
  for_newest_objects(j, "groups", kMaxSubgroups, [&](const json& g) {
    SubgroupProgress p;
    p.group = text_field(g, "group");
    const auto ranks = g.find("ranks");
    if (ranks == g.end() || !ranks->is_array() || ranks->empty() || ranks->size() > kMaxGroupRanks) return;
    for (const json& r : *ranks) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() > std::numeric_limits<int>::max()) {
        p.ranks.clear();
        break;
      }
      p.ranks.push_back(r.get<int>());
    }
    if (p.ranks.empty()) return;
    std::sort(p.ranks.begin(), p.ranks.end());
    p.last_enqueued = sequence_field(g, "last_enqueued");
    p.last_completed = std::min(sequence_field(g, "last_completed"), p.last_enqueued);
    const auto open = g.find("open");
    if (open != g.end() && open->is_object()) p.open = collective_field(*open);
    p.recent = recent_field(g, kMaxGroupRecent);
    out.push_back(std::move(p));
  });
  return out;
}

/// The heartbeat's "peer_waits" (point_to_point.py), oldest first: where
/// there are too many, the oldest are kept (the longest waits). An entry
/// without an op, or with a peer below -1 (any source), is left out.
std::vector<PeerWait> peer_waits_field(const json& j) {
  std::vector<PeerWait> out;
  const auto list = j.find("peer_waits");
  if (list == j.end() || !list->is_array()) return out;
  for (const json& w : *list) {
    if (out.size() >= kMaxPeerWaits) break;
    if (!w.is_object()) continue;
    PeerWait p;
    p.op = text_field(w, "op");
    p.peer = int32_field(w, "peer", -2);
    if (p.op.empty() || p.peer < -1) continue;
    p.bytes = std::max<int64_t>(int_field(w, "bytes", 0), 0);
    p.age = std::chrono::milliseconds(std::clamp<int64_t>(int_field(w, "age_ms", 0), 0, kMaxAgeMs));
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

CompanionMessageKind companion_message_kind(const std::string& text) {
  const std::optional<json> j = parse_object(text);
  if (!j) return CompanionMessageKind::kUnknown;
  const std::string type = text_field(*j, "type");
  if (type == "hello") return CompanionMessageKind::kHello;
  if (type == "heartbeat") return CompanionMessageKind::kHeartbeat;
  if (type == "stacks") return CompanionMessageKind::kStacks;
  if (type == "flight_recorder") return CompanionMessageKind::kFlightRecorder;
  return CompanionMessageKind::kUnknown;
}

std::optional<CompanionHello> parse_companion_hello(const std::string& text) {
  const std::optional<json> j = parse_object(text);
  if (!j || text_field(*j, "type") != "hello") return std::nullopt;
  CompanionHello h;
  h.job_id = text_field(*j, "job_id");
  h.token = text_field(*j, "token");
  h.rank = int32_field(*j, "rank", -1);
  h.local_rank = int32_field(*j, "local_rank", -1);
  h.generation = int_field(*j, "generation", -1);
  h.python = text_field(*j, "python");
  h.torch = text_field(*j, "torch");
  h.announcements = text_field(*j, "announcements");
  // local_rank may be left out (-1: unknown), never negative otherwise.
  if (h.rank < 0 || h.local_rank < -1 || h.generation < 0) return std::nullopt;
  return h;
}

std::optional<RankReport> parse_companion_heartbeat(const std::string& text, const CompanionHello& hello, int pid,
                                                    int node_rank, const std::string& host) {
  const std::optional<json> j = parse_object(text);
  if (!j || text_field(*j, "type") != "heartbeat") return std::nullopt;
  RankReport r;
  r.rank = hello.rank;
  r.local_rank = hello.local_rank;
  r.node_rank = node_rank;
  r.host = host;
  r.pid = pid;
  r.step = std::max<int64_t>(int_field(*j, "step", -1), -1);
  r.phase = phase_from_string(text_field(*j, "phase"));
  r.step_seconds = seconds_field(*j, "step_seconds");
  r.busy_seconds = seconds_field(*j, "busy_seconds");
  r.sync_seconds = std::min(seconds_field(*j, "sync_seconds"), r.busy_seconds);
  r.last_enqueued = sequence_field(*j, "last_enqueued");
  r.last_started = sequence_field(*j, "last_started");
  r.last_completed = sequence_field(*j, "last_completed");
  r.exiting = bool_field(*j, "exiting");
  r.activity = sequence_field(*j, "activity");
  r.announced = sequence_field(*j, "announced");
  r.recent = recent_field(*j, kMaxRecent);
  r.subgroups = subgroups_field(*j);
  r.peer_waits = peer_waits_field(*j);
  r.peer_calls_done = sequence_field(*j, "peer_done");
  return r;
}

std::optional<RankStacks> parse_companion_stacks(const std::string& text, int rank) {
  const std::optional<json> j = parse_object(text);
  if (!j || text_field(*j, "type") != "stacks") return std::nullopt;
  RankStacks out;
  out.rank = rank;
  out.language = "python";
  const auto threads = j->find("threads");
  if (threads == j->end() || !threads->is_array()) return out;
  for (const json& t : *threads) {
    if (out.threads.size() >= kMaxThreads) break;
    if (!t.is_object()) continue;
    ThreadStack thread;
    thread.name = text_field(t, "name");
    thread.main = bool_field(t, "main");
    // Outermost first: the innermost frames are kept when there are too many.
    for_newest_objects(t, "frames", kMaxFrames, [&](const json& f) {
      thread.frames.push_back(
          {text_field(f, "function"), text_field(f, "file"), std::max(int32_field(f, "line", 0), 0), text_field(f, "code")});
    });
    out.threads.push_back(std::move(thread));
  }
  return out;
}

std::string companion_dump_request() { return R"({"type":"dump_stacks"})"; }

}  // namespace ddp
