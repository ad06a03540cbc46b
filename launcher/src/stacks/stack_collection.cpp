#include "stacks/stack_collection.h"

#include <algorithm>

namespace ddp {

StackCollection::StackCollection(int world_size, SteadyTime deadline)
    : world_size_(std::max(world_size, 0)), deadline_(deadline), asked_(static_cast<size_t>(world_size_), false) {}

std::vector<int> StackCollection::take_requests(int first, int count) {
  std::vector<int> out;
  const int end = std::min(first + count, world_size_);
  for (int rank = std::max(first, 0); rank < end; ++rank) {
    if (asked_[static_cast<size_t>(rank)]) continue;
    asked_[static_cast<size_t>(rank)] = true;
    out.push_back(rank);
  }
  return out;
}

void StackCollection::on_answer(RankStacks stacks) {
  if (stacks.rank < 0 || stacks.rank >= world_size_) return;
  answers_.emplace(stacks.rank, std::move(stacks));
}

bool StackCollection::done(SteadyTime now) const {
  return static_cast<int>(answers_.size()) == world_size_ || now >= deadline_;
}

std::vector<RankStacks> StackCollection::answers() const {
  std::vector<RankStacks> out;
  out.reserve(answers_.size());
  for (const auto& [rank, stacks] : answers_) out.push_back(stacks);
  return out;
}

std::vector<int> StackCollection::unanswered() const {
  std::vector<int> out;
  for (int rank = 0; rank < world_size_; ++rank) {
    if (answers_.count(rank) == 0) out.push_back(rank);
  }
  return out;
}

}  // namespace ddp
