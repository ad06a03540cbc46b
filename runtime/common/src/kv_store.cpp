#include "ddp/common/kv_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

namespace ddp {

void KvStore::set(const std::string& key, std::string value, FiredWaits& fired) {
  data_[key] = std::move(value);
  release_ready(key, fired);
}

std::optional<std::string> KvStore::get(const std::string& key) const {
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

Status KvStore::add(const std::string& key, int64_t delta, int64_t& result, FiredWaits& fired) {
  int64_t current = 0;
  if (auto it = data_.find(key); it != data_.end()) {
    const std::string& text = it->second;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), current);
    if (ec != std::errc() || ptr != text.data() + text.size()) {
      return {StatusCode::kInvalidArgument, fmt::format("key '{}' does not hold an integer", key)};
    }
  }
  // Both numbers come from callers (Gloo's counters, but also any RPC): a
  // sum past 64 bits is refused, not wrapped.
  int64_t sum = 0;
  if (__builtin_add_overflow(current, delta, &sum)) {
    return {StatusCode::kInvalidArgument,
            fmt::format("adding {} to key '{}' ({}) overflows a 64-bit integer", delta, key, current)};
  }
  result = sum;
  data_[key] = std::to_string(result);
  release_ready(key, fired);
  return Status::Ok();
}

bool KvStore::compare_set(const std::string& key, const std::optional<std::string>& expected, std::string desired,
                          std::string& current, FiredWaits& fired) {
  auto it = data_.find(key);
  const bool matches = expected ? (it != data_.end() && it->second == *expected) : it == data_.end();
  if (matches) {
    data_[key] = std::move(desired);
    release_ready(key, fired);
  }
  const auto now = data_.find(key);
  current = now == data_.end() ? std::string() : now->second;
  return matches;
}

int64_t KvStore::delete_prefix(const std::string& prefix) {
  int64_t deleted = 0;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.compare(0, prefix.size(), prefix) == 0;) {
    it = data_.erase(it);
    ++deleted;
  }
  return deleted;
}

void KvStore::wait(std::vector<std::string> keys, SteadyTime deadline, WaitCallback done, FiredWaits& fired) {
  if (all_present(keys)) {
    fired.push_back({std::move(done), Status::Ok()});
    return;
  }
  const uint64_t id = next_wait_id_++;
  for (const auto& k : keys) {
    if (data_.count(k) == 0) waiting_on_.emplace(k, id);
  }
  waits_.emplace(id, Wait{std::move(keys), deadline, std::move(done)});
}

void KvStore::expire(SteadyTime now, FiredWaits& fired) {
  for (auto it = waits_.begin(); it != waits_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    std::vector<std::string> missing;
    for (const auto& k : it->second.keys) {
      if (data_.count(k) == 0) missing.push_back(k);
    }
    fired.push_back({std::move(it->second.done),
                     {StatusCode::kDeadlineExceeded,
                      fmt::format("timed out waiting for key(s): {}", fmt::join(missing, ", "))}});
    auto next = std::next(it);
    forget(it);
    it = next;
  }
}

void KvStore::abort_waits(const Status& status, FiredWaits& fired) {
  for (auto& [id, w] : waits_) fired.push_back({std::move(w.done), status});
  waits_.clear();
  waiting_on_.clear();
}

bool KvStore::all_present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [this](const std::string& k) { return data_.count(k) != 0; });
}

void KvStore::release_ready(const std::string& key, FiredWaits& fired) {
  auto range = waiting_on_.equal_range(key);
  if (range.first == range.second) return;
  std::vector<uint64_t> ids;
  for (auto it = range.first; it != range.second; ++it) ids.push_back(it->second);
  waiting_on_.erase(range.first, range.second);
  std::sort(ids.begin(), ids.end());  // release in the order the waits were made
  for (uint64_t id : ids) {
    auto it = waits_.find(id);
    if (it == waits_.end() || !all_present(it->second.keys)) continue;
    fired.push_back({std::move(it->second.done), Status::Ok()});
    forget(it);
  }
}

void KvStore::forget(std::map<uint64_t, Wait>::iterator it) {
  for (const auto& k : it->second.keys) {
    auto range = waiting_on_.equal_range(k);
    for (auto w = range.first; w != range.second;) {
      w = w->second == it->first ? waiting_on_.erase(w) : std::next(w);
    }
  }
  waits_.erase(it);
}

}  // namespace ddp
