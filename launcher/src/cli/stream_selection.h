#pragma once
// Which of a local rank's streams a --tee/--redirects value selects, and which
// local ranks --local-ranks-filter lets through to the console.

#include <map>
#include <set>
#include <string>

namespace ddp {

/// torchrun's Std values: 0 none, 1 stdout, 2 stderr, 3 both; either one value
/// for every local rank ("3") or a map ("0:1,1:2"; ranks not named get 0).
class StreamSelection {
 public:
  /// Throws UsageError naming the option when spec is malformed or names a
  /// local rank outside [0, nproc).
  static StreamSelection parse(const std::string& option, const std::string& spec, int nproc);

  bool selects_stdout(int local_rank) const { return (mask(local_rank) & 1) != 0; }
  bool selects_stderr(int local_rank) const { return (mask(local_rank) & 2) != 0; }

 private:
  int mask(int local_rank) const;
  int all_ = 0;
  std::map<int, int> per_rank_;
};

/// Parses "0,2" into {0, 2}; empty means every rank (returns an empty set).
/// Throws UsageError for anything that is not a local rank in [0, nproc).
std::set<int> parse_local_ranks_filter(const std::string& spec, int nproc);

/// Parses a whole non-negative decimal int; false on anything else.
bool parse_int(const std::string& text, int& value);

}  // namespace ddp
