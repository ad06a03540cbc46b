// libFuzzer target for expand_slurm_nodelist (SLURM_JOB_NODELIST and
// SLURM_STEP_NODELIST come from the environment). The bytes are the node list.
// Invariants: a list either throws UsageError or expands to at most 2^20
// plain host names (non-empty, no comma, bracket or whitespace, at most 255
// characters and none longer than the list itself), and expanding the expansion again, joined by commas,
// gives the same hosts.

#include <cctype>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/usage_error.h"
#include "fuzz_check.h"
#include "topology/slurm_nodelist.h"

namespace {

// Re-expanding a huge expansion only repeats the same code: keep runs fast.
constexpr std::size_t kMaxRoundTripBytes = 1 << 16;

bool plain_host_name(const std::string& h) {
  if (h.empty()) return false;
  for (const char c : h) {
    if (c == ',' || c == '[' || c == ']' || std::isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string list(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> hosts;
  try {
    hosts = ddp::expand_slurm_nodelist(list);
  } catch (const ddp::UsageError&) {
    return 0;
  }
  FUZZ_CHECK(!hosts.empty());
  FUZZ_CHECK(hosts.size() <= (std::size_t{1} << 20));
  std::size_t total = 0;
  for (const std::string& h : hosts) {
    FUZZ_CHECK(plain_host_name(h));
    FUZZ_CHECK(h.size() <= 255 && h.size() <= list.size());
    total += h.size() + 1;
  }
  if (total > kMaxRoundTripBytes) return 0;
  std::string joined;
  for (const std::string& h : hosts) joined += (joined.empty() ? "" : ",") + h;
  FUZZ_CHECK(ddp::expand_slurm_nodelist(joined) == hosts);
  return 0;
}
