#include "sync/checkpoint_sync.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "ddp/common/replace_file.h"
#include "output/byte_size.h"

namespace ddp {
namespace fs = std::filesystem;

namespace {

bool has_files(const std::string& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) return true;
  }
  return false;
}

// A key below the prefix as a path below DIR; nullopt for what must not be
// written there (a folder marker, an absolute path, or a way out through "..").
std::optional<std::string> local_path_of(const std::string& relative) {
  if (relative.empty() || relative.back() == '/' || relative.front() == '/') return std::nullopt;
  for (const auto& part : fs::path(relative)) {
    if (part == ".." || part == ".") return std::nullopt;
  }
  return relative;
}

}  // namespace

CheckpointSync::CheckpointSync(SyncSettings settings, StoreFactory make_store, std::string state_file,
                               UploadPolicy policy)
    : settings_(std::move(settings)), state_file_(std::move(state_file)), policy_(policy) {
  for (const SyncTarget& t : settings_.targets) {
    std::unique_ptr<ObjectStore> store = make_store(t);
    if (store) targets_.push_back({t, std::move(store), nullptr});
  }
}

CheckpointSync::~CheckpointSync() {
  if (thread_.joinable()) {
    stop_now_ = true;
    wake();
    thread_.join();
  }
  if (wakeup_fd_ >= 0) close(wakeup_fd_);
  if (done_fd_ >= 0) close(done_fd_);
}

void CheckpointSync::download_missing() {
  for (Target& t : targets_) {
    if (has_files(t.target.dir)) continue;
    const auto started = std::chrono::steady_clock::now();
    std::vector<StoredObject> objects;
    if (Status s = t.store->list_objects(t.target.prefix, 0, &objects); !s.ok()) {
      spdlog::warn("--sync {}: {} is empty, but the bucket cannot be listed ({}): the job starts without its files",
                   describe(t.target), t.target.dir, s.message());
      continue;
    }
    int files = 0;
    int64_t total = 0;
    std::vector<std::string> failed;
    for (const StoredObject& o : objects) {
      const std::optional<std::string> relative = local_path_of(o.key.substr(t.target.prefix.size()));
      if (!relative) continue;
      int64_t bytes = 0;
      const Status s = t.store->get_file(o.key, (fs::path(t.target.dir) / *relative).string(), &bytes);
      if (s.ok()) {
        ++files;
        total += bytes;
      } else {
        failed.push_back(fmt::format("{} ({})", *relative, s.message()));
      }
    }
    if (files == 0 && failed.empty()) continue;  // an empty prefix: a job's first start
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    spdlog::info("--sync {}: {} was empty: downloaded {} file(s) ({}) in {:.1f} s", describe(t.target),
                 t.target.dir, files, format_bytes(total), seconds);
    for (const std::string& f : failed) spdlog::warn("--sync {}: could not download {}", describe(t.target), f);
  }
}

void CheckpointSync::start_uploads() {
  for (Target& t : targets_) {
    try {
      t.uploader = std::make_unique<CheckpointUploader>(t.target, *t.store, SystemClock::instance(), policy_,
                                                        settings_.mirror_deletions);
    } catch (const std::system_error& e) {
      spdlog::warn("--sync {}: cannot watch {} ({}): it is not synced", describe(t.target), t.target.dir, e.what());
    }
  }
  wakeup_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  done_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wakeup_fd_ < 0 || done_fd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd");
  thread_ = std::thread([this] {
    upload_loop();
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(done_fd_, &one, sizeof one);
  });
}

void CheckpointSync::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wakeup_fd_, &one, sizeof one);
}

void CheckpointSync::upload_loop() {
  // Training comes first on a busy machine: this thread (Linux schedules
  // threads one by one) runs as SCHED_IDLE, below every nice level, so it
  // takes the cores the ranks leave idle (waiting on communication, on data,
  // on the GPU) and only a sliver when they are all busy. Where the policy is
  // refused, nice 19 is the next best thing.
  pthread_setname_np(pthread_self(), "ddplaunch-sync");   // how tests and `top -H` find it
  const auto tid = static_cast<pid_t>(syscall(SYS_gettid));
  const sched_param idle{};
  if (sched_setscheduler(tid, SCHED_IDLE, &idle) != 0) {
    [[maybe_unused]] int niced = setpriority(PRIO_PROCESS, static_cast<id_t>(tid), 19);
  }
  std::string last_state;
  while (!stop_now_) {
    // Read before the folders are: a pass that began before finish() was
    // asked may have missed the files written just before it, so only a pass
    // begun after it may call the uploads done (finish() wakes us for it).
    const bool finishing = finishing_;
    std::optional<SteadyTime> next;
    bool all_idle = true;
    for (Target& t : targets_) {
      if (!t.uploader) continue;
      const std::optional<SteadyTime> due = t.uploader->run_once();
      if (due && (!next || *due < *next)) next = due;
      all_idle = all_idle && t.uploader->idle();
      if (stop_now_) return;
    }
    write_state_file(&last_state);
    const SteadyTime now = SystemClock::instance().now();
    if (finishing) {
      std::lock_guard<std::mutex> lock(deadline_mutex_);
      if (all_idle || now >= finish_deadline_) return;
      if (!next || *next > finish_deadline_) next = finish_deadline_;
    }
    std::vector<pollfd> fds{{wakeup_fd_, POLLIN, 0}};
    for (const Target& t : targets_) {
      if (t.uploader) fds.push_back({t.uploader->watch_fd(), POLLIN, 0});
    }
    int timeout_ms = -1;
    if (next) {
      timeout_ms = static_cast<int>(std::clamp<int64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(*next - now).count() + 1, 0, 60'000));
    }
    if (poll(fds.data(), fds.size(), timeout_ms) > 0 && (fds[0].revents & POLLIN)) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t n = read(wakeup_fd_, &count, sizeof count);
    }
  }
}

nlohmann::json CheckpointSync::finish(Duration bound, int interrupt_fd) {
  if (!thread_.joinable()) return nullptr;
  {
    std::lock_guard<std::mutex> lock(deadline_mutex_);
    finish_deadline_ = SystemClock::instance().now() + bound;
  }
  finishing_ = true;
  wake();
  if (interrupt_fd >= 0) {
    pollfd fds[2] = {{done_fd_, POLLIN, 0}, {interrupt_fd, POLLIN, 0}};
    while (poll(fds, 2, -1) < 0 && errno == EINTR) {
    }
    if ((fds[0].revents & POLLIN) == 0 && (fds[1].revents & POLLIN) != 0) {
      stop_now_ = true;
      wake();
    }
  }
  thread_.join();
  std::string ignored;
  write_state_file(&ignored);
  return state_json();
}

nlohmann::json CheckpointSync::state_json() const {
  nlohmann::json targets = nlohmann::json::array();
  for (const Target& t : targets_) {
    if (!t.uploader) continue;
    nlohmann::json j = t.uploader->report().to_json();
    j["target"] = describe(t.target);
    j["dir"] = t.target.dir;
    targets.push_back(std::move(j));
  }
  if (targets.empty()) return nullptr;
  return {{"targets", std::move(targets)}};
}

std::string CheckpointSync::summary() const {
  std::string out;
  for (const Target& t : targets_) {
    if (!t.uploader) continue;
    if (!out.empty()) out += '\n';
    out += fmt::format("--sync {}: {}", describe(t.target), t.uploader->report().summary());
  }
  return out;
}

void CheckpointSync::write_state_file(std::string* last_written) const {
  if (state_file_.empty()) return;
  const std::string text = state_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text == *last_written) return;
  // Where the log folder is full or gone, nothing: the state is for display only.
  std::error_code ec;
  if (replace_file(state_file_, text + "\n", ec)) *last_written = text;
}

}  // namespace ddp
