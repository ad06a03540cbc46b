#pragma once
// A `ddplaunch serve` child process for the benchmarks. ddpbench must not link
// the launcher (DESIGN.md: nothing depends on launcher), and a coordinator in
// its own process has its own peak RSS and CPU time, read here from /proc.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace ddp::bench {

/// The ddplaunch to start: `explicit_path` when given, else the one beside
/// this executable (installed: same bin folder; build tree:
/// build/launcher/ddplaunch), else the first on PATH. Throws when none is found.
std::string find_ddplaunch(const std::string& explicit_path);

class ServeProcess {
 public:
  /// Starts `ddplaunch serve --host 127.0.0.1 --port 0` and waits (bounded)
  /// for its "listening on HOST:PORT" line; with metrics_port also
  /// `--metrics-port 0` and its "metrics on URL" line. Throws on failure.
  /// Call before any thread exists (it forks).
  static std::unique_ptr<ServeProcess> start(const std::string& ddplaunch, std::chrono::milliseconds timeout,
                                             bool metrics_port = false);
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  /// "http://127.0.0.1:PORT/" of --metrics-port; empty without it.
  const std::string& metrics_url() const { return metrics_url_; }
  pid_t pid() const { return pid_; }
  /// Resets the kernel's peak-RSS mark (VmHWM) to the current RSS.
  bool reset_peak_rss() const;
  /// VmHWM / VmRSS of the child in bytes, if readable.
  std::optional<int64_t> peak_rss_bytes() const;
  std::optional<int64_t> rss_bytes() const;
  /// CPU time the child has used so far, user + system, in seconds
  /// (/proc/PID/stat utime + stime), if readable.
  std::optional<double> cpu_seconds() const;
  /// SIGTERM, SIGKILL after `grace`, and reap. Idempotent.
  void stop(std::chrono::milliseconds grace = std::chrono::seconds(2));

 private:
  ServeProcess(pid_t pid, int out_fd) : pid_(pid), out_fd_(out_fd) {}
  std::optional<int64_t> status_field(const char* name) const;

  pid_t pid_;
  int out_fd_;
  std::string endpoint_;
  std::string metrics_url_;
};

}  // namespace ddp::bench
