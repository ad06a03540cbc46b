// Starting, measuring and stopping the `ddplaunch serve` the rendezvous and
// heartbeat benchmarks run against (see serve_process.h).
#include "serve_process.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace ddp::bench {
namespace fs = std::filesystem;
namespace {

bool is_executable(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("signal {}", WTERMSIG(status));
  return "unknown status";
}

}  // namespace

std::string find_ddplaunch(const std::string& explicit_path) {
  if (!explicit_path.empty()) {
    if (!is_executable(explicit_path)) throw std::runtime_error(fmt::format("--ddplaunch {}: not an executable file", explicit_path));
    return explicit_path;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path dir = self.parent_path();
    // Installed side by side; build tree build/worker/ddpbench -> build/launcher.
    for (const fs::path& p : {dir / "ddplaunch", dir / ".." / ".." / "launcher" / "ddplaunch",
                              dir / ".." / "launcher" / "ddplaunch"}) {
      if (is_executable(p)) return fs::weakly_canonical(p, ec).string();
    }
  }
  if (const char* path = std::getenv("PATH")) {
    std::string entries = path;
    size_t begin = 0;
    while (begin <= entries.size()) {
      size_t end = entries.find(':', begin);
      if (end == std::string::npos) end = entries.size();
      const fs::path p = fs::path(entries.substr(begin, end - begin)) / "ddplaunch";
      if (end > begin && is_executable(p)) return p.string();
      begin = end + 1;
    }
  }
  throw std::runtime_error("ddplaunch not found beside ddpbench nor on PATH; give --ddplaunch or --coordinator");
}

std::unique_ptr<ServeProcess> ServeProcess::start(const std::string& ddplaunch, std::chrono::milliseconds timeout,
                                                  bool metrics_port) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error(fmt::format("pipe: {}", std::strerror(errno)));
  // The node timeout is raised so that finished benchmark jobs, which send no
  // agent heartbeats, do not turn into "lost node" work during later repeats.
  std::vector<std::string> args = {ddplaunch, "serve", "--host", "127.0.0.1", "--port", "0",
                                   "--log-level", "warn", "--node-timeout", "86400"};
  if (metrics_port) args.insert(args.end(), {"--metrics-port", "0"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    // Dies with ddpbench, whatever kills it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(out[1], STDOUT_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::unique_ptr<ServeProcess> proc(new ServeProcess(pid, out[0]));

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string text;
  for (;;) {
    const auto newline = text.find('\n');
    if (newline != std::string::npos) {
      const std::string line = text.substr(0, newline);
      // serve prints both lines together, the gRPC port first.
      for (auto [prefix, value] : {std::pair<std::string, std::string*>{"listening on ", &proc->endpoint_},
                                   std::pair<std::string, std::string*>{"metrics on ", &proc->metrics_url_}}) {
        if (line.rfind(prefix, 0) == 0) *value = line.substr(prefix.size());
      }
      if (!proc->endpoint_.empty() && (!metrics_port || !proc->metrics_url_.empty())) return proc;
      text.erase(0, newline + 1);
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      proc->stop();
      throw std::runtime_error(fmt::format("{} serve did not say where it listens within {} ms", ddplaunch, timeout.count()));
    }
    pollfd pfd{proc->out_fd_, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) continue;
    char buf[512];
    const ssize_t n = ::read(proc->out_fd_, buf, sizeof buf);
    if (n > 0) {
      text.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      proc->pid_ = -1;
      throw std::runtime_error(fmt::format("{} serve ended before listening: {}", ddplaunch, describe_wait_status(status)));
    }
  }
}

ServeProcess::~ServeProcess() { stop(); }

std::optional<int64_t> ServeProcess::status_field(const char* name) const {
  if (pid_ <= 0) return std::nullopt;
  std::ifstream in(fmt::format("/proc/{}/status", pid_));
  std::string line;
  const std::string prefix = std::string(name) + ":";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    // "VmHWM:\t   12345 kB"
    return static_cast<int64_t>(std::strtoll(line.c_str() + prefix.size(), nullptr, 10)) * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> ServeProcess::peak_rss_bytes() const { return status_field("VmHWM"); }
std::optional<int64_t> ServeProcess::rss_bytes() const { return status_field("VmRSS"); }

std::optional<double> ServeProcess::cpu_seconds() const {
  if (pid_ <= 0) return std::nullopt;
  std::ifstream in(fmt::format("/proc/{}/stat", pid_));
  std::string stat;
  std::getline(in, stat);
  // proc(5): "PID (COMM) STATE ..." where COMM may hold spaces or ')': the
  // fields after the last ')' are counted from field 3 (state); utime and
  // stime are fields 14 and 15.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(close + 1));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::strtoull(field.c_str(), nullptr, 10);
    if (i == 15) {
      stime = std::strtoull(field.c_str(), nullptr, 10);
      return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
    }
  }
  return std::nullopt;
}

bool ServeProcess::reset_peak_rss() const {
  if (pid_ <= 0) return false;
  std::ofstream out(fmt::format("/proc/{}/clear_refs", pid_));
  out << "5";  // proc(5): "5" resets the peak resident set size
  out.flush();
  return static_cast<bool>(out);
}

void ServeProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + grace;
    int status = 0;
    pid_t r = 0;
    while ((r = ::waitpid(pid_, &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (r == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }
  if (out_fd_ >= 0) {
    ::close(out_fd_);
    out_fd_ = -1;
  }
}

}  // namespace ddp::bench
