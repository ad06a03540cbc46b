#pragma once
// How reports write a set of ranks: "0,1,3" or "0-7,9" (runs of three or
// more as ranges). Threading: free functions, no shared state.

#include <string>
#include <vector>

namespace ddp {

/// `ranks` ascending, without repeats.
std::string format_ranks(const std::vector<int>& ranks);

/// "rank 3" or "ranks 0,2": how a sentence names them.
std::string rank_word(const std::vector<int>& ranks);

}  // namespace ddp
