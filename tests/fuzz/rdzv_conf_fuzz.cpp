// libFuzzer target for --rdzv-conf KEY=VALUE,... The parser (apply_rdzv_conf)
// is private to topology/launch_plan.cpp, so this drives the smallest public
// unit that runs it: resolve_launch_plan, for a single-node `true` with the
// bytes as --rdzv-conf and nothing else set (it also binds one loopback port
// per run, as every launch does).
// Invariants: an accepted conf gives strictly positive timeouts no longer
// than the parser's limit, and writing them back out as a conf gives the same
// plan again (up to a double's rounding).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "cli/launch_options.h"
#include "cli/usage_error.h"
#include "fuzz_check.h"
#include "topology/launch_plan.h"

namespace {

// What seconds_value() in launch_plan.cpp accepts at most.
constexpr auto kMaxTimeout = std::chrono::seconds(1'000'000'000);

ddp::LaunchPlan plan_for(const std::string& conf) {
  ddp::LaunchOptions o;
  o.rdzv_conf = conf;
  o.no_python = true;
  o.command = {"true"};
  o.log_dir = "/nonexistent";  // only a path in the plan; nothing is created
  return ddp::resolve_launch_plan(o, [](const char* name) -> std::optional<std::string> {
    if (std::string(name) == "PATH") return std::string("/usr/bin:/bin");
    return std::nullopt;
  });
}

void check_timeout(ddp::Duration d) {
  FUZZ_CHECK(d > ddp::Duration::zero());
  FUZZ_CHECK(d <= kMaxTimeout);
}

std::string seconds_text(ddp::Duration d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  return fmt::format("{}.{:09}", ns / 1'000'000'000, ns % 1'000'000'000);
}

// Seconds go through a double both ways: equal up to a few units in the last
// place, and a nanosecond of truncation.
bool near(ddp::Duration a, ddp::Duration b) {
  const auto diff = a > b ? a - b : b - a;
  return diff <= std::chrono::nanoseconds(1) + a / (int64_t{1} << 48);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string conf(reinterpret_cast<const char*>(data), size);
  ddp::LaunchPlan plan;
  try {
    plan = plan_for(conf);
  } catch (const ddp::UsageError&) {
    return 0;
  }
  check_timeout(plan.join_timeout);
  check_timeout(plan.last_call_timeout);
  check_timeout(plan.node_timeout);
  check_timeout(plan.agent_heartbeat_interval);

  std::string written = fmt::format("join_timeout={},last_call_timeout={},node_timeout={},heartbeat_interval={}",
                                    seconds_text(plan.join_timeout), seconds_text(plan.last_call_timeout),
                                    seconds_text(plan.node_timeout), seconds_text(plan.agent_heartbeat_interval));
  if (plan.is_host) written += *plan.is_host ? ",is_host=true" : ",is_host=false";
  const ddp::LaunchPlan again = plan_for(written);
  FUZZ_CHECK(near(again.join_timeout, plan.join_timeout));
  FUZZ_CHECK(near(again.last_call_timeout, plan.last_call_timeout));
  FUZZ_CHECK(near(again.node_timeout, plan.node_timeout));
  FUZZ_CHECK(near(again.agent_heartbeat_interval, plan.agent_heartbeat_interval));
  FUZZ_CHECK(again.is_host == plan.is_host);
  return 0;
}
