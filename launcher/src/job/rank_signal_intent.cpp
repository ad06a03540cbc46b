#include "job/rank_signal_intent.h"

#include "ddp/common/replace_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <system_error>

namespace ddp {

RankSignalIntent::RankSignalIntent(std::filesystem::path path) : path_(std::move(path)) { clear(); }

RankSignalIntent::~RankSignalIntent() { clear(); }

void RankSignalIntent::clear() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  written_.clear();
}

void RankSignalIntent::write(const std::string& word) {
  if (path_.empty() || written_ == word) return;
  std::error_code ec;
  if (!replace_file(path_, word + "\n", ec)) {
    // The ranks then treat an outside SIGTERM as unarranged and die of it
    // after a moment: the stop at a step boundary is lost, nothing hangs.
    spdlog::warn("cannot tell the ranks what a SIGTERM means ({}: {})", path_.string(), ec.message());
    return;
  }
  written_ = word;
}

}  // namespace ddp
