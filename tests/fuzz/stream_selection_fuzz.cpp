// libFuzzer target for the --local-ranks-filter, --redirects/--tee and
// plain-number parsers (cli/stream_selection.h). The first byte picks nproc
// (1..256), the rest is the option's value.
// Invariants: parse_int accepts digits only and gives back their value;
// a filter names only ranks in [0, nproc) and reads back the same when
// written out again; a stream selection, written out rank by rank, selects
// the same streams when parsed again.

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "cli/stream_selection.h"
#include "cli/usage_error.h"
#include "fuzz_check.h"

namespace {

void check_parse_int(const std::string& text) {
  int v = -1;
  if (!ddp::parse_int(text, v)) return;
  FUZZ_CHECK(v >= 0);
  FUZZ_CHECK(!text.empty());
  for (const char c : text) FUZZ_CHECK(c >= '0' && c <= '9');
  const std::size_t first = text.find_first_not_of('0');
  FUZZ_CHECK(std::to_string(v) == (first == std::string::npos ? "0" : text.substr(first)));
}

void check_filter(const std::string& spec, int nproc) {
  std::set<int> ranks;
  try {
    ranks = ddp::parse_local_ranks_filter(spec, nproc);
  } catch (const ddp::UsageError&) {
    return;
  }
  FUZZ_CHECK(ranks.empty() == spec.empty());
  std::string written;
  for (const int r : ranks) {
    FUZZ_CHECK(r >= 0 && r < nproc);
    written += (written.empty() ? "" : ",") + std::to_string(r);
  }
  FUZZ_CHECK(ddp::parse_local_ranks_filter(written, nproc) == ranks);
}

void check_selection(const std::string& spec, int nproc) {
  ddp::StreamSelection s;
  try {
    s = ddp::StreamSelection::parse("redirects", spec, nproc);
  } catch (const ddp::UsageError&) {
    return;
  }
  std::string written;
  for (int r = 0; r < nproc; ++r) {
    const int mask = (s.selects_stdout(r) ? 1 : 0) | (s.selects_stderr(r) ? 2 : 0);
    written += (written.empty() ? "" : ",") + std::to_string(r) + ":" + std::to_string(mask);
  }
  const ddp::StreamSelection again = ddp::StreamSelection::parse("redirects", written, nproc);
  for (int r = 0; r < nproc; ++r) {
    FUZZ_CHECK(again.selects_stdout(r) == s.selects_stdout(r));
    FUZZ_CHECK(again.selects_stderr(r) == s.selects_stderr(r));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const int nproc = 1 + data[0];
  const std::string spec(reinterpret_cast<const char*>(data) + 1, size - 1);
  check_parse_int(spec);
  check_filter(spec, nproc);
  check_selection(spec, nproc);
  return 0;
}
