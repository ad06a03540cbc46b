#pragma once
// CoordinatorFailover: how an agent moves to the job's next coordinator
// endpoint when it has lost the current one (--rdzv-endpoint HOST1:PORT,
// HOST2:PORT,...; the rules are in membership/failover.h). AgentSession
// decides when; the implementation (job/endpoint_failover.h in production, a
// fake in unit tests) decides where and whether this agent hosts it.
//
// Threading: called on the agent's event-loop thread only.

#include <string>

#include "membership/failover.h"

namespace ddp {

class CoordinatorFailover {
 public:
  virtual ~CoordinatorFailover() = default;
  /// How many endpoints the job lists (1: no failover).
  virtual int endpoints() const = 0;
  /// "host:port" of endpoint epoch (0-based).
  virtual std::string endpoint(int epoch) const = 0;
  /// Sends every later coordinator call to endpoint takeover.epoch, first
  /// hosting its coordinator in this process (seeded with takeover) when
  /// this machine is that endpoint's host and no other agent hosts it yet.
  /// Returns whether this agent hosts it.
  virtual bool move_to(const Takeover& takeover) = 0;
};

}  // namespace ddp
