#!/usr/bin/python3
"""Benchmark: what the Python companion costs a PyTorch DDP script.

The script (tests/bench/companion_ab_worker.py: Gloo on the CPU, an MLP, a DataLoader,
an optimizer step and a loss all_reduce per step) runs under ddplaunch, for each MLP
width, --repeat rounds of two runs, alternated (the order flips every round):
  - with the companion, and with --no-python-companion: the whole cost, the step time
    of the same script with and without it;
  - inside the run with the companion, blocks of steps alternate between the
    companion's wrappers and torch's originals (same process, same heartbeat thread):
    what the wrappers add to a step, free of the drift between runs.
Reported per width: the median step time of rank 0 (median over rounds) each way,
their ratio, the added microseconds per step (wall: the median over pairs of adjacent
blocks of their difference, so that slow drifts of the machine cancel; and the
main thread's CPU), and the CPU
time of the companion's heartbeat thread per rank per second. A small width gives a
step of about a millisecond, where the companion's fixed cost per step shows most; a
wide one gives a step closer to real training. Target: overhead <= 1% of step time.

Usage: /usr/bin/python3 tests/bench/companion_bench.py [--repeat 5] [--steps 2000]
         [--widths 32,1024] [--nproc 2] [--heartbeat-interval 1] [--json]
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
SCRIPT = os.path.join(HERE, "companion_ab_worker.py")
DDPLAUNCH = os.environ.get("DDPLAUNCH_BIN") or os.path.join(REPO, "build", "launcher", "ddplaunch")
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
AB_RE = re.compile(r"ab: on_ms=([\d.]+) off_ms=([\d.]+) all_ms=([\d.]+) on_cpu_us=([\d.]+) off_cpu_us=([\d.]+) "
                   r"pair_us=(-?[\d.]+) pairs=(\d+) wrapped=(\d+) steps=\d+ companion_cpu_ms=([\d.]+) wall_s=([\d.]+)")
TARGET_PERCENT = 1.0


def run_once(args, width, companion, log_dir):
    cmd = [DDPLAUNCH, f"--nproc-per-node={args.nproc}", f"--heartbeat-interval={args.heartbeat_interval}",
           f"--log-dir={log_dir}"]
    if not companion:
        cmd.append("--no-python-companion")
    steps = max(args.steps // max(1, width // 128), 200)   # wide steps take longer: fewer of them
    block = max(10, min(50, steps // 20))   # at least 10 pairs of blocks however few the steps
    cmd += [SCRIPT, "--steps", str(steps), "--width", str(width), "--block", str(block),
            "--warm", str(min(5, block // 5))]
    env = dict(os.environ, PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1")
    r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=900)
    m = AB_RE.search(r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"run failed (exit {r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    on, off, all_ms, on_cpu, off_cpu, pair_us, pairs, wrapped, cpu_ms, wall = m.groups()
    if companion != (int(wrapped) > 0):
        raise RuntimeError(f"{wrapped} functions wrapped in a run {'with' if companion else 'without'} the companion")
    return {"on_ms": float(on), "off_ms": float(off), "all_ms": float(all_ms), "on_cpu_us": float(on_cpu),
            "off_cpu_us": float(off_cpu), "pair_us": float(pair_us), "pairs": int(pairs),
            "companion_cpu_ms": float(cpu_ms), "wall_s": float(wall)}


def measure_width(args, width, logs):
    runs = {True: [], False: []}
    for i in range(args.repeat):
        for companion in ((True, False) if i % 2 == 0 else (False, True)):
            runs[companion].append(run_once(args, width, companion, logs))
    med = statistics.median
    with_c = med(r["on_ms"] for r in runs[True])
    without = med(r["all_ms"] for r in runs[False])
    ab_on = med(r["on_ms"] for r in runs[True])
    ab_off = med(r["off_ms"] for r in runs[True])
    return {"width": width, "step_ms_with_companion": with_c, "step_ms_without": without,
            "ratio": with_c / without, "overhead_percent": (with_c / without - 1) * 100,
            "ab_step_ms_wrapped": ab_on, "ab_step_ms_unwrapped": ab_off, "ab_ratio": ab_on / ab_off,
            "ab_added_us_per_step": med(r["pair_us"] for r in runs[True]),
            "ab_pairs": sum(r["pairs"] for r in runs[True]),
            "ab_added_percent": med(r["pair_us"] for r in runs[True]) / 10 / without,
            "ab_added_cpu_us_per_step": med(r["on_cpu_us"] - r["off_cpu_us"] for r in runs[True]),
            "companion_cpu_ms_per_s_per_rank": med(r["companion_cpu_ms"] / r["wall_s"] for r in runs[True])}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--widths", default="32,1024")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--heartbeat-interval", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    try:
        widths = [int(w) for w in args.widths.split(",")]
    except ValueError:
        print(f"companion_bench: --widths wants numbers separated by commas, got {args.widths!r}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="companion-bench-") as logs:
        try:
            for width in widths:
                results.append(measure_width(args, width, logs))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"companion_bench: {e}", file=sys.stderr)
            return 1
    if args.json:
        print(json.dumps({"widths": results, "heartbeat_interval_s": args.heartbeat_interval,
                          "repeat": args.repeat, "steps": args.steps, "nproc": args.nproc}))
    print(f"PyTorch DDP step time, rank 0, median over {args.repeat} rounds, {args.nproc} ranks (Gloo, CPU), "
          f"heartbeat every {args.heartbeat_interval:g} s")
    for r in results:
        print(f"MLP width {r['width']}:")
        print(f"  with the companion          {r['step_ms_with_companion']:9.3f} ms")
        print(f"  --no-python-companion       {r['step_ms_without']:9.3f} ms")
        print(f"  ratio                       {r['ratio']:9.4f}  (overhead {r['overhead_percent']:+.2f}%, "
              f"target <= {TARGET_PERCENT:g}%: {'met' if r['overhead_percent'] <= TARGET_PERCENT else 'NOT met'})")
        print(f"  in-run A/B: wrapped         {r['ab_step_ms_wrapped']:9.3f} ms, torch's originals "
              f"{r['ab_step_ms_unwrapped']:.3f} ms, ratio {r['ab_ratio']:.4f}")
        met = "met" if r["ab_added_percent"] <= TARGET_PERCENT else "NOT met"
        print(f"  the wrappers add            {r['ab_added_us_per_step']:9.1f} us per step, "
              f"{r['ab_added_percent']:.2f}% of the step (median over {r['ab_pairs']} pairs of adjacent "
              f"blocks; target <= {TARGET_PERCENT:g}%: {met}); main thread's CPU "
              f"{r['ab_added_cpu_us_per_step']:+.1f} us")
        print(f"  heartbeat thread's CPU      {r['companion_cpu_ms_per_s_per_rank']:9.3f} ms per second per rank "
              f"({r['companion_cpu_ms_per_s_per_rank'] / 10:.3f}% of a core)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
