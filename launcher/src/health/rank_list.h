#pragma once
// How reports write a set of ranks: "0,1,3" or "0-7,9" (runs of three or
// more as ranges). Threading: a free function, no shared state.

#include <string>
#include <vector>

namespace ddp {

/// `ranks` ascending, without repeats.
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace ddp
