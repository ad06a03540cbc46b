// PosixSpawner with real processes: a worker leads its own process group, and
// a CPU affinity asked for (--numa-binding) is in place before the program runs.

#include "process/posix_spawner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "numa/cpu_list.h"
#include "numa/machine_topology.h"

namespace ddp {
namespace {

// Runs request to its end; returns its stdout.
std::string run(const SpawnRequest& request) {
  PosixSpawner spawner(nullptr);
  const SpawnedProcess p = spawner.spawn(request);
  fcntl(p.stdout_fd, F_SETFL, 0);  // blocking: read to the end of the stream
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(p.stdout_fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  int status = 0;
  waitpid(p.pid, &status, 0);
  spawner.release(p.pid);
  close(p.stdout_fd);
  close(p.stderr_fd);
  return out;
}

TEST(PosixSpawner, AppliesTheAskedCpuAffinityBeforeTheProgramRuns) {
  const std::set<int> mine = allowed_cpus();
  ASSERT_FALSE(mine.empty());
  const int last = *mine.rbegin();
  const std::string out = run({{"sh", "-c", "grep Cpus_allowed_list /proc/self/status"},
                               {"PATH=/usr/bin:/bin"},
                               {last}});
  EXPECT_EQ(out, "Cpus_allowed_list:\t" + std::to_string(last) + "\n");
  // no affinity asked: the launcher's own
  const std::string inherited = run({{"sh", "-c", "grep Cpus_allowed_list /proc/self/status"},
                                     {"PATH=/usr/bin:/bin"},
                                     {}});
  EXPECT_EQ(inherited, "Cpus_allowed_list:\t" + format_cpu_list(mine) + "\n");
}

}  // namespace
}  // namespace ddp
