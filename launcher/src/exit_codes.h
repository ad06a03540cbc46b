#pragma once
// ddplaunch's own exit statuses. A worker failure exits with the failing
// rank's code instead (128+S when the worker died of signal S), and a signal N
// sent to ddplaunch itself gives 128+N.

namespace ddp::exit_code {

inline constexpr int kSuccess = 0;
/// Bad command line or environment: nothing was started.
inline constexpr int kUsage = 2;
/// ddplaunch itself could not run the job (e.g. fork failed).
inline constexpr int kInternal = 70;
/// A node of the job went silent (its agent died, was cut off or stopped
/// heartbeating); every agent of the job exits with it.
inline constexpr int kNodeLost = 123;
/// Asked to stop (SIGTERM with --stop-timeout), every rank stopped at a step
/// boundary and exited 0: the job is unfinished and should run again
/// (EX_TEMPFAIL; a Slurm script requeues on it).
inline constexpr int kRequeue = 75;
/// A hung rank was detected (heartbeats; see the hang detector).
inline constexpr int kHang = 124;
/// Rendezvous with the coordinator failed.
inline constexpr int kRendezvous = 125;

inline constexpr int for_signal(int signo) { return 128 + signo; }

}  // namespace ddp::exit_code
