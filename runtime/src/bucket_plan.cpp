#include "ddp/runtime/bucket_plan.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace ddp {

namespace {

struct OpenBucket {
  PlannedBucket bucket;
  int64_t first_visit = 0;  // visit position of its first member
};

struct Group {
  OpenBucket open;
  bool has_open = false;
  int closed = 0;  // buckets this group has closed so far
};

}  // namespace

std::vector<PlannedBucket> plan_buckets(const std::vector<BucketParam>& params, const BucketCaps& caps,
                                        const std::vector<int64_t>& order) {
  if (caps.first_bucket_cap_bytes <= 0 || caps.bucket_cap_bytes <= 0) {
    throw std::invalid_argument("plan_buckets: bucket caps must be positive");
  }
  std::unordered_map<int64_t, size_t> by_index;
  for (size_t i = 0; i < params.size(); ++i) {
    const BucketParam& p = params[i];
    if (p.numel < 0 || p.element_size <= 0) {
      throw std::invalid_argument("plan_buckets: parameter " + std::to_string(p.index) +
                                  " has a negative size or a non-positive element size");
    }
    if (!by_index.emplace(p.index, i).second) {
      throw std::invalid_argument("plan_buckets: duplicate parameter index " + std::to_string(p.index));
    }
  }

  std::vector<size_t> visit;  // positions into params
  visit.reserve(params.size());
  if (order.empty()) {
    std::vector<size_t> pos(params.size());
    for (size_t i = 0; i < pos.size(); ++i) pos[i] = i;
    std::stable_sort(pos.begin(), pos.end(),
                     [&](size_t a, size_t b) { return params[a].index > params[b].index; });
    visit = std::move(pos);
  } else {
    if (order.size() != params.size()) {
      throw std::invalid_argument("plan_buckets: order has " + std::to_string(order.size()) +
                                  " entries for " + std::to_string(params.size()) + " parameters");
    }
    std::vector<bool> seen(params.size(), false);
    for (int64_t idx : order) {
      auto it = by_index.find(idx);
      if (it == by_index.end()) {
        throw std::invalid_argument("plan_buckets: order names unknown parameter " + std::to_string(idx));
      }
      if (seen[it->second]) {
        throw std::invalid_argument("plan_buckets: order names parameter " + std::to_string(idx) + " twice");
      }
      seen[it->second] = true;
      visit.push_back(it->second);
    }
  }

  std::map<std::pair<std::string, std::string>, Group> groups;
  std::vector<OpenBucket> done;
  auto close = [&](Group& g) {
    if (!g.has_open) return;
    done.push_back(std::move(g.open));
    g.open = OpenBucket{};
    g.has_open = false;
    ++g.closed;
  };

  for (size_t v = 0; v < visit.size(); ++v) {
    const BucketParam& p = params[visit[v]];
    Group& g = groups[{p.dtype, p.device}];
    const int64_t bytes = p.numel * p.element_size;
    const int64_t cap = g.closed == 0 ? caps.first_bucket_cap_bytes : caps.bucket_cap_bytes;
    if (!g.has_open) {
      g.open.bucket.dtype = p.dtype;
      g.open.bucket.device = p.device;
      g.open.first_visit = static_cast<int64_t>(v);
      g.has_open = true;
    }
    PlannedBucket& b = g.open.bucket;
    b.params.push_back(p.index);
    b.offsets.push_back(b.numel);
    b.numel += p.numel;
    b.bytes += bytes;
    // Full once it reaches the cap, as PyTorch's: the parameter that crosses
    // the cap joins the bucket rather than starting the next one, so a
    // layer's bias and weight (ready at the same moment) share a bucket.
    if (b.bytes >= cap) close(g);
  }
  for (auto& entry : groups) close(entry.second);

  std::stable_sort(done.begin(), done.end(),
                   [](const OpenBucket& a, const OpenBucket& b) { return a.first_visit < b.first_visit; });
  std::vector<PlannedBucket> out;
  out.reserve(done.size());
  for (auto& ob : done) out.push_back(std::move(ob.bucket));
  return out;
}

}  // namespace ddp
