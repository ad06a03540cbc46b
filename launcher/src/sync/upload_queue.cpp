#include "sync/upload_queue.h"

#include <fmt/format.h>

#include <algorithm>

#include "output/byte_size.h"

namespace ddp {

UploadQueue::UploadQueue(const Clock& clock, UploadPolicy policy) : clock_(clock), policy_(policy) {}

void UploadQueue::file_ready(const std::string& relative_path) {
  Pending& p = pending_[relative_path];
  if (p.sending) {
    p.changed_while_sending = true;  // what is being sent may be the old content
    return;
  }
  p.due = clock_.now() + policy_.settle;  // a newer version: settle again, attempts as they were
}

void UploadQueue::file_gone(const std::string& relative_path) {
  auto it = pending_.find(relative_path);
  if (it == pending_.end()) return;
  if (it->second.sending) {
    it->second.gone_while_sending = true;  // whatever the send gives, nothing is left to send
    return;
  }
  pending_.erase(it);
}

std::optional<std::string> UploadQueue::next_due() {
  const SteadyTime now = clock_.now();
  auto best = pending_.end();
  for (auto it = pending_.begin(); it != pending_.end(); ++it) {
    if (it->second.sending || it->second.due > now) continue;
    if (best == pending_.end() || it->second.due < best->second.due) best = it;
  }
  if (best == pending_.end()) return std::nullopt;
  best->second.sending = true;
  best->second.changed_while_sending = false;
  best->second.gone_while_sending = false;
  return best->first;
}

std::optional<SteadyTime> UploadQueue::next_due_time() const {
  std::optional<SteadyTime> due;
  for (const auto& [path, p] : pending_) {
    if (!p.sending && (!due || p.due < *due)) due = p.due;
  }
  return due;
}

Duration UploadQueue::backoff(int attempts) const {
  Duration d = policy_.first_retry;
  for (int i = 1; i < attempts && d < policy_.max_retry; ++i) d *= 2;
  return std::min(d, policy_.max_retry);
}

void UploadQueue::done(const std::string& relative_path, const Status& outcome, int64_t bytes) {
  auto it = pending_.find(relative_path);
  if (it == pending_.end()) return;
  Pending& p = it->second;
  p.sending = false;
  if (outcome.ok()) {
    ++uploaded_;
    uploaded_bytes_ += bytes;
  }
  if ((p.gone_while_sending && !p.changed_while_sending) || outcome.code() == StatusCode::kNotFound) {
    pending_.erase(it);
    return;
  }
  if (outcome.ok()) {
    if (!p.changed_while_sending) {
      pending_.erase(it);
      return;
    }
    p = Pending{};  // the newer content goes up once it settles
    p.due = clock_.now() + policy_.settle;
    return;
  }
  ++p.attempts;
  p.last_error = outcome.message();
  p.due = clock_.now() + (p.changed_while_sending ? policy_.settle : backoff(p.attempts));
}

SyncReport UploadQueue::report() const {
  SyncReport r;
  r.uploaded = uploaded_;
  r.uploaded_bytes = uploaded_bytes_;
  r.pending = static_cast<int>(pending_.size());
  for (const auto& [path, p] : pending_) {
    if (p.attempts > 0) {
      r.failing.push_back({path, p.attempts, p.last_error});
    } else {
      r.waiting.push_back(path);
    }
  }
  return r;
}

nlohmann::json SyncReport::to_json() const {
  nlohmann::json failing_json = nlohmann::json::array();
  for (const auto& f : failing) {
    failing_json.push_back({{"path", f.path}, {"attempts", f.attempts}, {"last_error", f.last_error}});
  }
  nlohmann::json j = {{"uploaded", uploaded},
                      {"uploaded_bytes", uploaded_bytes},
                      {"pending", pending},
                      {"failing", failing_json},
                      {"waiting", waiting},
                      {"deleted", deleted},
                      {"delete_failures", delete_failures}};
  if (send_seconds > 0) j["bytes_per_second"] = static_cast<double>(uploaded_bytes) / send_seconds;
  return j;
}

std::string SyncReport::summary() const {
  const std::string speed =
      send_seconds > 0 ? fmt::format(" at {}/s", format_bytes(static_cast<int64_t>(uploaded_bytes / send_seconds))) : "";
  std::string out =
      fmt::format("{} file(s) uploaded ({}{}), {} pending", uploaded, format_bytes(uploaded_bytes), speed, pending);
  if (deleted > 0) out += fmt::format(", {} deleted", deleted);
  for (const auto& path : waiting) out += fmt::format("; {} not sent yet", path);
  for (const auto& f : failing) {
    out += fmt::format("; {} failed {} time(s): {}", f.path, f.attempts, f.last_error);
  }
  for (const auto& d : delete_failures) out += fmt::format("; not deleted: {}", d);
  return out;
}

}  // namespace ddp
