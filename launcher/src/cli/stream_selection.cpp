#include "cli/stream_selection.h"

#include <fmt/format.h>

#include <charconv>
#include <sstream>

#include "cli/usage_error.h"

namespace ddp {
namespace {

int parse_std(const std::string& option, const std::string& text) {
  int v = 0;
  if (!parse_int(text, v) || v > 3) {
    throw UsageError(fmt::format("--{}: '{}' is not 0, 1, 2 or 3", option, text));
  }
  return v;
}

int parse_local_rank(const std::string& option, const std::string& text, int nproc) {
  int r = 0;
  if (!parse_int(text, r) || r >= nproc) {
    throw UsageError(fmt::format("--{}: '{}' is not a local rank (0..{})", option, text, nproc - 1));
  }
  return r;
}

}  // namespace

bool parse_int(const std::string& text, int& value) {
  // from_chars takes a minus sign, and "-0" would pass the value check.
  if (text.empty() || text.front() == '-') return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  return ec == std::errc() && ptr == end && value >= 0;
}

StreamSelection StreamSelection::parse(const std::string& option, const std::string& spec, int nproc) {
  StreamSelection s;
  if (spec.find(':') == std::string::npos) {
    s.all_ = parse_std(option, spec);
    return s;
  }
  // getline drops a trailing empty item: "0:1," would pass as "0:1".
  if (spec.back() == ',') throw UsageError(fmt::format("--{}: '{}' ends with an empty entry", option, spec));
  std::stringstream items(spec);
  for (std::string item; std::getline(items, item, ',');) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      throw UsageError(fmt::format("--{}: '{}' is not LOCAL_RANK:VALUE", option, item));
    }
    const int rank = parse_local_rank(option, item.substr(0, colon), nproc);
    s.per_rank_[rank] = parse_std(option, item.substr(colon + 1));
  }
  return s;
}

int StreamSelection::mask(int local_rank) const {
  if (per_rank_.empty()) return all_;
  auto it = per_rank_.find(local_rank);
  return it == per_rank_.end() ? 0 : it->second;
}

std::set<int> parse_local_ranks_filter(const std::string& spec, int nproc) {
  std::set<int> ranks;
  if (spec.empty()) return ranks;
  if (spec.back() == ',') {  // getline drops a trailing empty item: "0," would pass as "0"
    throw UsageError(fmt::format("--local-ranks-filter: '{}' ends with an empty entry", spec));
  }
  std::stringstream items(spec);
  for (std::string item; std::getline(items, item, ',');) {
    ranks.insert(parse_local_rank("local-ranks-filter", item, nproc));
  }
  if (ranks.empty()) throw UsageError("--local-ranks-filter: no local rank given");
  return ranks;
}

}  // namespace ddp
