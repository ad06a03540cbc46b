#pragma once
// The messages of the Python companion's channel (companion_channel.h), from
// JSON text into the plain structs the health logic works on. Outside input:
// every field is checked for type and range, lists are capped, and a message
// that does not parse yields nullopt, never an exception.
//
// Companion -> agent, one JSON object per message:
//   {"type":"hello","version":1,"job_id","token","rank","local_rank","generation","pid","python","torch",
//    "announcements"}   (the file of collective_announcements.h, if it made one)
//   {"type":"heartbeat","step","phase","step_seconds","busy_seconds","sync_seconds","last_enqueued","last_started",
//    "last_completed","recent":[{"sequence","op","bytes","dtype","state","age_ms"}],"exiting","torch",
//    "announced","activity","groups":[{"group","ranks","last_enqueued","last_completed","open","recent"}],
//    "peer_waits":[{"op","peer","bytes","age_ms"}],"peer_done"}   (point-to-point calls completed)
//   {"type":"stacks","threads":[{"name","main","frames":[{"function","file","line","code"}]}]}
//   {"type":"flight_recorder","path","summary"}
// Agent -> companion: {"type":"dump_stacks"}.
//
// Threading: free functions, no shared state.

#include <optional>
#include <string>

#include "health/rank_health.h"
#include "stacks/rank_stacks.h"

namespace ddp {

enum class CompanionMessageKind { kHello, kHeartbeat, kStacks, kFlightRecorder, kUnknown };

struct CompanionHello {
  std::string job_id;
  std::string token;
  int rank = -1;
  int local_rank = -1;
  int64_t generation = -1;
  std::string python;  // the interpreter's version
  std::string torch;   // empty: not imported (yet)
  std::string announcements;  // path of its collective announcements; empty: none
};

/// The message's "type", or kUnknown (also for text that is not a JSON object).
CompanionMessageKind companion_message_kind(const std::string& text);

std::optional<CompanionHello> parse_companion_hello(const std::string& text);

/// A heartbeat of the rank that said `hello`, running as `pid` on this node.
std::optional<RankReport> parse_companion_heartbeat(const std::string& text, const CompanionHello& hello, int pid,
                                                    int node_rank, const std::string& host);

std::optional<RankStacks> parse_companion_stacks(const std::string& text, int rank);

/// The agent's request for every thread's stack.
std::string companion_dump_request();

}  // namespace ddp
