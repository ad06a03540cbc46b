#!/usr/bin/python3
"""Benchmark ddplaunch against torchrun on one node.

What is measured, and why:

1. Launch overhead: wall time to start 8 workers that do nothing
   (/bin/true) and for the launcher to exit 0.  This is the fixed cost a
   launcher adds to every job and every restart; target: torchrun takes at
   least 50x as long as ddplaunch.

2. Teardown latency: 8 workers each write their pid to a file and
   `exec sleep 60`; once all 8 pid files exist one worker is SIGKILLed and we
   time kill -> launcher exit.  That is how long the surviving ranks of a
   crashed job keep running (and holding GPUs) before the job fails; target:
   ddplaunch under 50 ms.  Afterwards every worker pid must be gone.

torchrun polls its workers every --monitor_interval seconds (default 5), which
dominates both figures, so the peer figure is torchrun at its default (what
users get) and a second, labelled row shows torchrun with an interval of 0.1 s.

torchrun is run through torchrun_shim.py (Debian's torch 1.13 torchrun does not
start under Python 3.11); torch 1.13 only accepts the underscore spellings of
its options, so those are used for it.  ddplaunch accepts both.

Each figure is the median of --repeat runs.  The script exits 0 when the runs
worked, whether or not targets were met, and 1 when a run failed (a launcher
exited with an unexpected code, hung, or workers never started).

Usage: /usr/bin/python3 tests/bench/launch_bench.py [--repeat N] [--json]
"""
import argparse
import glob
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_runs import free_port  # noqa: E402
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(HERE, "torchrun_shim.py")

NPROC = 8
KILLED_LOCAL_RANK = 3          # any rank but 0, so "rank 0 is special" bugs show
LAUNCH_TIMEOUT_S = 60          # a no-op launch; torchrun needs ~6 s
PIDFILE_TIMEOUT_S = 30         # all workers up (torchrun imports torch first)
TEARDOWN_TIMEOUT_S = 60        # torchrun may wait 30 s for SIGTERMed workers
LAUNCH_TARGET_RATIO = 50.0
TEARDOWN_TARGET_MS = 50.0

# Writes the pid via a temporary name + rename so the reader never sees a
# half-written file; `exec` makes the recorded pid the sleeper itself, so the
# SIGKILL hits the worker process the launcher started.
WORKER_SH = """#!/bin/sh
echo $$ > "$1/.rank$LOCAL_RANK.tmp" && mv "$1/.rank$LOCAL_RANK.tmp" "$1/rank$LOCAL_RANK.pid"
exec sleep 60
"""


class BenchError(Exception):
    """A run itself failed (as opposed to a target being missed)."""


# ---------------------------------------------------------------- launchers

class Launcher:
    """How to spell one launcher's command line, and which exit codes it owes."""

    def __init__(self, name, argv_prefix, spell, teardown_exit, program_opts=()):
        self.name = name
        self.argv_prefix = argv_prefix
        self.spell = spell                  # option name -> this launcher's spelling
        self.teardown_exit = teardown_exit  # exit code after a worker got SIGKILL
        self.program_opts = list(program_opts)  # needed to run a non-Python PROGRAM

    def command(self, log_dir, program, args=(), extra=()):
        opts = [f"{self.spell('nproc_per_node')}={NPROC}",
                f"{self.spell('log_dir')}={log_dir}", *extra, *self.program_opts]
        return [*self.argv_prefix, *opts, program, *args]


class TorchrunLauncher(Launcher):
    def __init__(self, python, monitor_interval=None):
        label = "torchrun" if monitor_interval is None else \
            f"torchrun --monitor_interval={monitor_interval:g}"
        super().__init__(label, [python, SHIM], lambda o: "--" + o,
                         teardown_exit=1,  # ChildFailedError -> 1
                         program_opts=["--no_python"])
        self.monitor_interval = monitor_interval

    def command(self, log_dir, program, args=(), extra=()):
        # A free port instead of torchrun's fixed 29500, so a concurrent test
        # run (or a lingering TIME_WAIT) cannot make the benchmark fail.
        extra = [*extra, f"--master_port={free_port()}"]
        if self.monitor_interval is not None:
            extra.append(f"--monitor_interval={self.monitor_interval:g}")
        return super().command(log_dir, program, args, extra)


def ddplaunch_launcher(binary):
    # Contract: a worker killed by signal S makes ddplaunch exit 128+S.
    return Launcher("ddplaunch", [binary], lambda o: "--" + o.replace("_", "-"),
                    teardown_exit=128 + signal.SIGKILL)



# ---------------------------------------------------- process bookkeeping

class Run:
    """One launcher process in its own session; always killed and reaped on exit.

    Workers under torchrun share the launcher's process group, so killpg reaches
    them; ddplaunch puts each worker in its own group, so callers also hand us
    the worker pids they learn (worker_pids) to be sure nothing outlives us.
    """

    def __init__(self, cmd, out_dir, env):
        self.cmd = cmd
        self.log_path = os.path.join(out_dir, "launcher.log")
        self.worker_pids = {}   # pid -> start time, to avoid killing a reused pid
        self.proc = None
        self.env = env

    def __enter__(self):
        log = open(self.log_path, "wb")
        try:
            self.t_start = time.perf_counter()
            self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env=self.env,
                                         start_new_session=True)
        finally:
            log.close()
        return self

    def __exit__(self, *exc):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()
        kill_alive(self.worker_pids)

    def wait_exit(self, timeout):
        """Block until the launcher exits; returns the exit time (perf_counter)."""
        if not wait_pid_exit(self.proc.pid, timeout):
            raise BenchError(f"{' '.join(self.cmd)}: still running after {timeout} s"
                             + self.log_tail())
        t_exit = time.perf_counter()
        self.proc.wait()  # reaps at once: the process is already a zombie
        return t_exit

    def check_exit(self, expected):
        code = self.proc.returncode
        code = 128 - code if code < 0 else code  # report signals like a shell
        if code != expected:
            raise BenchError(f"{' '.join(self.cmd)}: exit code {code}, expected "
                             f"{expected}" + self.log_tail())

    def log_tail(self, lines=15):
        with open(self.log_path, errors="replace") as f:
            tail = f.read().splitlines()[-lines:]
        return "\n  launcher output (tail):\n    " + "\n    ".join(tail) if tail else ""


def wait_pid_exit(pid, timeout):
    """Wait for a child to exit without reaping it; False on timeout.

    A pidfd turns readable the instant the process exits, so the measured time
    is not quantised the way Popen.wait(timeout)'s sleep loop (up to 50 ms) is.
    """
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return _poll_pid_exit(pid, timeout)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(fd)


def _poll_pid_exit(pid, timeout):
    """Fallback without pidfd: a tight waitid(WNOWAIT) loop, 0.2 ms resolution."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            return True
        time.sleep(0.0002)
    return False


def start_time(pid):
    """The kernel's start time of pid (clock ticks since boot), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state, starttime = fields[0], fields[19]
    return None if state in "ZX" else starttime  # a zombie is dead, just unreaped


def alive(worker_pids):
    """The recorded workers still running (same pid and same start time)."""
    return [pid for pid, started in worker_pids.items()
            if started is not None and start_time(pid) == started]


def kill_alive(worker_pids):
    for pid in alive(worker_pids):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def bench_env(python):
    env = dict(os.environ)
    env["PYTHON_EXEC"] = python
    return env


# ------------------------------------------------------------ measurements

def time_launch(launcher, env):
    """Seconds from spawning the launcher to its exit, 8 x /bin/true."""
    with tempfile.TemporaryDirectory(prefix="ddpbench-launch-") as tmp:
        cmd = launcher.command(os.path.join(tmp, "logs"), "/bin/true")
        with Run(cmd, tmp, env) as run:
            elapsed = run.wait_exit(LAUNCH_TIMEOUT_S) - run.t_start
            run.check_exit(0)
    return elapsed


def wait_pidfiles(run, pid_dir):
    """Wait (bounded) until every worker wrote its pid; returns {local_rank: pid}."""
    deadline = time.monotonic() + PIDFILE_TIMEOUT_S
    while True:
        found = {}
        for path in glob.glob(os.path.join(pid_dir, "rank*.pid")):
            rank = int(os.path.basename(path)[4:-4])
            with open(path) as f:
                found[rank] = int(f.read())
        for pid in found.values():
            run.worker_pids.setdefault(pid, start_time(pid))
        if len(found) == NPROC:
            return found
        if run.proc.poll() is not None:
            raise BenchError(f"{run.cmd[0]} exited ({run.proc.returncode}) before all "
                             f"workers started ({len(found)}/{NPROC})" + run.log_tail())
        if time.monotonic() > deadline:
            raise BenchError(f"only {len(found)}/{NPROC} workers started within "
                             f"{PIDFILE_TIMEOUT_S} s" + run.log_tail())
        time.sleep(0.005)


def time_teardown(launcher, env):
    """(seconds from SIGKILL of one worker to launcher exit, workers left alive)."""
    with tempfile.TemporaryDirectory(prefix="ddpbench-teardown-") as tmp:
        worker = os.path.join(tmp, "worker.sh")
        with open(worker, "w") as f:
            f.write(WORKER_SH)
        os.chmod(worker, 0o755)
        pid_dir = os.path.join(tmp, "pids")
        os.mkdir(pid_dir)
        cmd = launcher.command(os.path.join(tmp, "logs"), worker, [pid_dir])
        with Run(cmd, tmp, env) as run:
            pids = wait_pidfiles(run, pid_dir)
            t_kill = time.perf_counter()
            os.kill(pids[KILLED_LOCAL_RANK], signal.SIGKILL)
            elapsed = run.wait_exit(TEARDOWN_TIMEOUT_S) - t_kill
            # Checked before Run's cleanup kills whatever is left.
            leftovers = alive(run.worker_pids)
            run.check_exit(launcher.teardown_exit)
    return elapsed, leftovers


def measure(launcher, env, repeat, log):
    """All samples for one launcher: launch times, teardown times, leftovers."""
    launch, teardown, leftovers = [], [], []
    for i in range(repeat):
        launch.append(time_launch(launcher, env))
        log(f"  {launcher.name}: launch #{i + 1}: {launch[-1] * 1e3:.1f} ms")
    for i in range(repeat):
        elapsed, left = time_teardown(launcher, env)
        teardown.append(elapsed)
        leftovers.extend(left)
        log(f"  {launcher.name}: teardown #{i + 1}: {elapsed * 1e3:.1f} ms"
            + (f", LEFTOVER pids {left}" if left else ""))
    return {"monitor_interval": getattr(launcher, "monitor_interval", None),
            "launch_s": launch, "teardown_s": teardown, "leftover_pids": leftovers,
            "launch_median_s": statistics.median(launch),
            "teardown_median_s": statistics.median(teardown)}


# ----------------------------------------------------------------- report

def ratio(peer, ours):
    return peer / ours if ours > 0 else float("inf")


def table_rows(ours, peers):
    """metric | ddplaunch | torchrun | ratio | target | met? for each peer."""
    rows = []
    for peer_name, peer in peers.items():
        headline = peer_name == "torchrun"
        suffix = "" if headline else f", peer polls {peer['monitor_interval']:g} s"
        r = ratio(peer["launch_median_s"], ours["launch_median_s"])
        rows.append([f"launch 8 x /bin/true (ms){suffix}",
                     f"{ours['launch_median_s'] * 1e3:.1f}",
                     f"{peer['launch_median_s'] * 1e3:.1f}", f"{r:.1f}x",
                     f">= {LAUNCH_TARGET_RATIO:g}x" if headline else "(info)",
                     ("yes" if r >= LAUNCH_TARGET_RATIO else "NO") if headline else "-"])
        ms = ours["teardown_median_s"] * 1e3
        rows.append([f"teardown after SIGKILL (ms){suffix}", f"{ms:.1f}",
                     f"{peer['teardown_median_s'] * 1e3:.1f}",
                     f"{ratio(peer['teardown_median_s'], ours['teardown_median_s']):.1f}x",
                     f"< {TEARDOWN_TARGET_MS:g} ms" if headline else "(info)",
                     ("yes" if ms < TEARDOWN_TARGET_MS else "NO") if headline else "-"])
        if headline:
            rows.append(["workers alive after exit", str(len(ours["leftover_pids"])),
                         str(len(peer["leftover_pids"])), "", "0",
                         "yes" if not ours["leftover_pids"] else "NO"])
    return rows


def format_table(rows):
    header = ["metric", "ddplaunch", "torchrun", "ratio", "target", "met?"]
    rows = [header] + rows
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = [" | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(lines)


def peer_only_table(peers):
    lines = []
    for name, p in peers.items():
        lines.append(f"{name}: launch {p['launch_median_s'] * 1e3:.1f} ms, teardown "
                     f"{p['teardown_median_s'] * 1e3:.1f} ms, leftovers {len(p['leftover_pids'])}")
    return "\n".join(lines)


# ------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ddplaunch", default=os.environ.get("DDPLAUNCH_BIN") or
                   os.path.join(REPO_ROOT, "build", "launcher", "ddplaunch"),
                   help="ddplaunch binary (default: $DDPLAUNCH_BIN or build/launcher/ddplaunch)")
    p.add_argument("--python", default=os.environ.get("PYTHON_EXEC") or "/usr/bin/python3",
                   help="Python with torch, runs torchrun (default: $PYTHON_EXEC or /usr/bin/python3)")
    p.add_argument("--repeat", type=int, default=5, help="runs per figure (median taken)")
    p.add_argument("--json", action="store_true", help="also print one JSON line of all figures")
    p.add_argument("--only", choices=["ddplaunch", "torchrun"],
                   help="measure just one side (no ratios)")
    p.add_argument("--fast-peer-interval", type=float, default=0.1, metavar="S",
                   help="monitor interval of the second torchrun row (0: leave the row out)")
    args = p.parse_args(argv)
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    return args


def exit_on_signal(signum, _frame):
    # SystemExit unwinds through every Run's cleanup, so an interrupted benchmark
    # leaves no launcher or worker behind (the default SIGTERM action would).
    sys.exit(128 + signum)


def main(argv=None):
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, exit_on_signal)
    env = bench_env(args.python)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # progress, off stdout

    if args.only != "torchrun" and not os.access(args.ddplaunch, os.X_OK):
        log(f"launch_bench: error: no ddplaunch binary at {args.ddplaunch}")
        return 1
    peers = {"torchrun": TorchrunLauncher(args.python)}
    if args.fast_peer_interval > 0:
        fast = TorchrunLauncher(args.python, args.fast_peer_interval)
        peers[fast.name] = fast

    results = {"repeat": args.repeat, "nproc": NPROC}
    try:
        if args.only != "torchrun":
            results["ddplaunch"] = measure(ddplaunch_launcher(args.ddplaunch), env,
                                           args.repeat, log)
        if args.only != "ddplaunch":
            for name, launcher in peers.items():
                results[name] = measure(launcher, env, args.repeat, log)
    except BenchError as e:
        log(f"launch_bench: run failed: {e}")
        return 1

    peer_results = {n: results[n] for n in peers if n in results}
    if "ddplaunch" in results and peer_results:
        print(format_table(table_rows(results["ddplaunch"], peer_results)))
    elif peer_results:
        print(peer_only_table(peer_results))
    else:
        d = results["ddplaunch"]
        print(f"ddplaunch: launch {d['launch_median_s'] * 1e3:.1f} ms, teardown "
              f"{d['teardown_median_s'] * 1e3:.1f} ms, leftovers {len(d['leftover_pids'])}")
    note = f"median of {args.repeat} runs"
    if peer_results:
        note += ("; torchrun = torch 1.13 via torchrun_shim.py, polling its workers "
                 "every 5 s unless a row says otherwise")
    print(f"({note})")
    if args.json:
        print(json.dumps(results, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
