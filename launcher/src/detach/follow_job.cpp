#include "detach/follow_job.h"

#include <poll.h>
#include <unistd.h>

#include <cstdio>

#include "process/interrupt_signals.h"


namespace ddp {
namespace {

// How often the job's record is read again: an agent's end shows within this.
constexpr int kRecordPollMs = 200;

void copy_new(std::vector<std::unique_ptr<FileFollower>>& files) {
  for (auto& f : files) f->copy_new(stdout);
  std::fflush(stdout);
}

}  // namespace

FollowOutcome follow_until_job_ends(std::vector<std::unique_ptr<FileFollower>>& files, const JobRecord& job,
                                    const std::function<void()>& each_round) {
  const int signals = interrupt_signal_fd();

  FollowOutcome out;
  for (;;) {
    copy_new(files);
    if (each_round) each_round();
    if (std::optional<JobRecord> end = end_of(job)) {
      copy_new(files);  // the agent wrote its last lines before its record
      out.ended = std::move(end);
      break;
    }
    std::vector<pollfd> fds;
    if (signals >= 0) fds.push_back({signals, POLLIN, 0});
    for (auto& f : files) {
      if (f->change_fd() >= 0) fds.push_back({f->change_fd(), POLLIN, 0});
    }
    poll(fds.data(), fds.size(), kRecordPollMs);
    if (signals >= 0 && (fds.front().revents & POLLIN)) {
      copy_new(files);
      out.interrupted = true;
      break;
    }
  }
  if (signals >= 0) close(signals);
  return out;
}

}  // namespace ddp
