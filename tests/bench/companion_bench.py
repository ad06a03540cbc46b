#!/usr/bin/python3
"""Benchmark: what the Python companion costs a PyTorch DDP script (issue 16).

The same plain DDP script (tests/integration/workers/torch_ddp_trouble.py, Gloo on the
CPU, a small MLP, a DataLoader, an optimizer step and a loss all_reduce per step) runs
under ddplaunch with the companion and with --no-python-companion, alternated (the order
flips every round), --repeat rounds. Reported: the median step time of rank 0 over each
run's steps after 20 warm-up steps (median over runs), the overhead as a ratio, and the
CPU time of the companion's threads (heartbeats every --heartbeat-interval) per rank
per second of run. Target: overhead <= 1% of step time.

Usage: /usr/bin/python3 tests/bench/companion_bench.py [--repeat 5] [--steps 400]
         [--nproc 2] [--heartbeat-interval 1] [--json]
Exits 0 when every run worked, 1 otherwise. The table comes last.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(REPO, "tests", "integration", "workers", "torch_ddp_trouble.py")
DDPLAUNCH = os.environ.get("DDPLAUNCH_BIN") or os.path.join(REPO, "build", "launcher", "ddplaunch")
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
TIMING_RE = re.compile(r"timing: median_step_ms=([\d.]+) steps=(\d+) companion_cpu_ms=([\d.]+) wall_s=([\d.]+)")


def run_once(args, companion, log_dir):
    cmd = [DDPLAUNCH, f"--nproc-per-node={args.nproc}", f"--heartbeat-interval={args.heartbeat_interval}",
           f"--log-dir={log_dir}"]
    if not companion:
        cmd.append("--no-python-companion")
    cmd += [SCRIPT, "--steps", str(args.steps), "--step-sleep", "0", "--timing"]
    env = dict(os.environ, PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=600)
    m = TIMING_RE.search(r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"run failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return {"step_ms": float(m.group(1)), "cpu_ms": float(m.group(3)), "wall_s": float(m.group(4))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--heartbeat-interval", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="companion-bench-") as logs:
        try:
            for i in range(args.repeat):
                for companion in ((True, False) if i % 2 == 0 else (False, True)):
                    runs[companion].append(run_once(args, companion, logs))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"companion_bench: {e}", file=sys.stderr)
            return 1
    on = statistics.median(r["step_ms"] for r in runs[True])
    off = statistics.median(r["step_ms"] for r in runs[False])
    cpu_per_s = statistics.median(r["cpu_ms"] / r["wall_s"] for r in runs[True])
    result = {"step_ms_with_companion": on, "step_ms_without": off, "ratio": on / off,
              "overhead_percent": (on / off - 1) * 100, "companion_cpu_ms_per_s_per_rank": cpu_per_s,
              "heartbeat_interval_s": args.heartbeat_interval, "repeat": args.repeat, "steps": args.steps,
              "nproc": args.nproc}
    if args.json:
        print(json.dumps(result))
    print(f"PyTorch DDP step time, rank 0 median over {args.repeat} alternated runs of {args.steps} steps, "
          f"{args.nproc} ranks (Gloo, CPU)")
    print(f"  with the companion        {on:8.3f} ms")
    print(f"  --no-python-companion     {off:8.3f} ms")
    print(f"  ratio                     {on / off:8.4f}  (overhead {(on / off - 1) * 100:+.2f}%, target <= 1%)")
    print(f"  companion threads' CPU    {cpu_per_s:8.3f} ms per second per rank "
          f"({cpu_per_s / 10:.3f}% of a core) at a {args.heartbeat_interval:g} s heartbeat interval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
