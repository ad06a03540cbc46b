#include "health/rank_list.h"

#include <fmt/format.h>

namespace ddp {

std::string format_ranks(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    if (j - i >= 2) {
      out += fmt::format("{}-{}", ranks[i], ranks[j]);
    } else {
      out += std::to_string(ranks[i]);
      if (j > i) out += "," + std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out;
}

std::string rank_word(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + format_ranks(ranks);
}

}  // namespace ddp
