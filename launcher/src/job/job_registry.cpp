#include "job/job_registry.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "agent/local_agent_service.h"
#include "process/process_alive.h"

namespace ddp {
namespace fs = std::filesystem;
namespace {

fs::path jobs_dir() {
  const fs::path dir = fs::path(agent_socket_dir()) / "jobs";
  std::error_code ec;
  fs::create_directories(dir, ec);
  chmod(dir.c_str(), 0700);
  return dir;
}

}  // namespace

JobRegistration::JobRegistration(const RunningJob& job)
    : job_(job), path_((jobs_dir() / (job.job_id + "." + std::to_string(job.pid) + ".json")).string()) {
  write();
}

void JobRegistration::update_endpoint(const std::string& endpoint) {
  job_.endpoint = endpoint;
  write();
}

void JobRegistration::write() const {
  const nlohmann::json j = {{"job_id", job_.job_id},     {"endpoint", job_.endpoint}, {"token", job_.token},
                            {"tls_cert", job_.tls_cert}, {"tls_key", job_.tls_key},   {"tls_ca", job_.tls_ca},
                            {"pid", job_.pid},           {"started_unix_s", job_.started_unix_s}};
  const std::string temporary = path_ + ".tmp";
  const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;  // status will not find this job; the job itself runs on
  const std::string text = j.dump();
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written || rename(temporary.c_str(), path_.c_str()) != 0) unlink(temporary.c_str());
}

JobRegistration::~JobRegistration() { unlink(path_.c_str()); }

std::vector<RunningJob> running_jobs() {
  std::vector<RunningJob> jobs;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(jobs_dir(), ec)) {
    if (entry.path().extension() != ".json") continue;
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(entry.path()), nullptr, false);
    if (!j.is_object()) continue;
    RunningJob job;
    job.job_id = j.value("job_id", "");
    job.endpoint = j.value("endpoint", "");
    job.token = j.value("token", "");
    job.tls_cert = j.value("tls_cert", "");
    job.tls_key = j.value("tls_key", "");
    job.tls_ca = j.value("tls_ca", "");
    job.pid = j.value("pid", 0);
    job.started_unix_s = j.value("started_unix_s", 0.0);
    if (!process_alive(job.pid)) {
      fs::remove(entry.path(), ec);  // its agent was killed before it could
      continue;
    }
    jobs.push_back(std::move(job));
  }
  std::sort(jobs.begin(), jobs.end(),
            [](const RunningJob& a, const RunningJob& b) { return a.started_unix_s < b.started_unix_s; });
  return jobs;
}

}  // namespace ddp
