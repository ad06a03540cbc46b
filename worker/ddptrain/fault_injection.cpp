#include "fault_injection.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace ddp::train {
namespace {

int64_t parse_int(const std::string& text, const std::string& what, const std::string& whole) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || v < 0) {
    throw std::invalid_argument("--inject-fault " + whole + ": " + what + " '" + text + "' is not a non-negative integer");
  }
  return v;
}

}  // namespace

FaultSpec parse_fault(const std::string& text) {
  const size_t at = text.find('@');
  const size_t colon = text.rfind(':');
  if (at == std::string::npos || colon == std::string::npos || colon < at) {
    throw std::invalid_argument("--inject-fault " + text + ": expected KIND@STEP:RANK, e.g. crash@20:1");
  }
  std::string kind = text.substr(0, at);
  FaultSpec f;
  if (const size_t eq = kind.find('='); eq != std::string::npos) {
    const std::string secs = kind.substr(eq + 1);
    kind = kind.substr(0, eq);
    char* end = nullptr;
    f.seconds = std::strtod(secs.c_str(), &end);
    if (kind != "slow" || secs.empty() || *end != '\0' || !(f.seconds >= 0)) {
      throw std::invalid_argument("--inject-fault " + text + ": only slow takes =SECONDS (a non-negative number)");
    }
  }
  if (kind == "crash") f.kind = FaultKind::kCrash;
  else if (kind == "exit") f.kind = FaultKind::kExit;
  else if (kind == "hang") f.kind = FaultKind::kHang;
  else if (kind == "silent") f.kind = FaultKind::kSilent;
  else if (kind == "slow") f.kind = FaultKind::kSlow;
  else throw std::invalid_argument("--inject-fault " + text + ": unknown kind '" + kind + "' (crash, exit, hang, silent, slow)");
  f.step = parse_int(text.substr(at + 1, colon - at - 1), "STEP", text);
  const std::string rank = text.substr(colon + 1);
  f.rank = rank == "*" ? -1 : static_cast<int>(parse_int(rank, "RANK", text));
  return f;
}

FaultInjector::FaultInjector(std::vector<FaultSpec> faults, int rank, int restart_count,
                             std::function<void()> stop_heartbeats)
    : stop_heartbeats_(std::move(stop_heartbeats)) {
  if (restart_count != 0) return;  // a restarted job recovers
  for (const FaultSpec& f : faults) {
    if (f.rank == -1 || f.rank == rank) faults_.push_back(f);
  }
}

void FaultInjector::before_step(int64_t step) {
  for (const FaultSpec& f : faults_) {
    if (f.kind == FaultKind::kSlow) {
      if (step >= f.step) std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
      continue;
    }
    if (step != f.step) continue;
    std::fprintf(stderr, "ddptrain: injected fault at step %lld\n", static_cast<long long>(step));
    std::fflush(stderr);
    switch (f.kind) {
      case FaultKind::kCrash: std::abort();
      case FaultKind::kExit: std::_Exit(17);
      case FaultKind::kSilent:
        if (stop_heartbeats_) stop_heartbeats_();
        [[fallthrough]];
      case FaultKind::kHang:
        for (;;) pause();
      case FaultKind::kSlow: break;
    }
  }
}

}  // namespace ddp::train
