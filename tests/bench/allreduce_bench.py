#!/usr/bin/python3
"""Benchmark the worker runtime's Gloo all-reduce against torch.distributed's.

Both sides run under the same ddplaunch, with the same ranks, sizes, dtype,
iterations and warm-up, and measure the same thing:

  * ddplaunch: `ddpbench allreduce --backend gloo --json` (the runtime's Collective);
  * torch:     tests/bench/torch_allreduce_peer.py (Debian's python3-torch,
               init_process_group("gloo"), torch.distributed.all_reduce);
  * for information, ddplaunch again with DDP_GLOO_SHM=0 ("tcp"): the
    runtime's all-reduce over Gloo's TCP ring like torch's, without the
    shared-memory path it takes when all ranks share one host;
  * for information, ddplaunch on reduction buffers ("bucket": `--buffer
    reduction`), the shared memory DDP's buckets live in, which the ranks
    reduce in place without copying through the slots.

Per size each side fills the tensor with rank+1, barriers, times one synchronous
all-reduce SUM, repeats --iters times after --warmup untimed ones, checks the
sum, and reports the slowest rank's mean time.  The two sides run alternately
(--repeat times each, the order flipped every round so neither always runs on a
warmer machine) and each figure is the median over the repeats.  OMP_NUM_THREADS
is pinned to 1 for both.

ratio = torch time / ddplaunch time: above 1 means the runtime is faster.
Target: ratio >= 1.0 at every size from 1 MiB up; smaller sizes are
shown for information.

Exit status: 0 when every run worked and every sum was right, whether or not the
targets were met; 1 when a run failed, hung (every run has a timeout, after
which its launcher and workers are killed), printed no result for a size, or
reported correct=false; 2 on bad usage.

Usage: /usr/bin/python3 tests/bench/allreduce_bench.py [--ranks N] [--sizes 1M,4M,16M,64M]
           [--repeat R] [--iters K] [--warmup W] [--no-tcp] [--json]
"""
import argparse
import json
import os
import re
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_runs import BenchError, Run  # noqa: E402

REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
PEER = os.path.join(HERE, "torch_allreduce_peer.py")

TARGET_RATIO = 1.0
TARGET_FROM_BYTES = 1 << 20     # the target applies from 1 MiB up
PREFIX_RE = re.compile(r"^\[\d+:\d+\] ")

_SCALE = {"": 1, "K": 1 << 10, "k": 1 << 10, "KiB": 1 << 10,
          "M": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30}


def parse_size(text):
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2) not in _SCALE:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (use e.g. 4096, 4K, 1M, 1G)")
    return int(float(m.group(1)) * _SCALE[m.group(2)])


def human(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


# ------------------------------------------------------------ measurement

def side_command(impl, args, log_dir):
    launcher = [args.ddplaunch, f"--nproc-per-node={args.ranks}", "--log-level", "warn",
                f"--log-dir={log_dir}"]
    common = ["--sizes", ",".join(str(s) for s in args.sizes), "--iters", str(args.iters),
              "--warmup", str(args.warmup), "--dtype", args.dtype, "--json"]
    if impl in ("ddplaunch", "tcp", "bucket"):
        extra = ["--buffer", "reduction"] if impl == "bucket" else []
        return launcher + [args.ddpbench, "allreduce", "--backend", "gloo"] + extra + common
    return launcher + [PEER] + common


def parse_rows(text):
    """The JSON result lines a run printed (ddplaunch's "[node:rank] " prefix stripped)."""
    rows = []
    for line in text.splitlines():
        line = PREFIX_RE.sub("", line, count=1).strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("bench") == "allreduce":
            rows.append(row)
    return rows


def run_side(impl, args, env, tmp, index):
    """One run of one side: {bytes: row}; raises BenchError on any failure."""
    name = f"{impl}_{index}"
    log_dir = os.path.join(tmp, "logs")
    if impl == "tcp":
        env = dict(env, DDP_GLOO_SHM="0")
    with Run(side_command(impl, args, log_dir), env, tmp, name) as run:
        rc = run.wait(args.timeout)
        text = run.stdout()
        if rc != 0:
            raise BenchError(f"{impl}: {' '.join(run.cmd)}: exit code {rc}" + run.tail())
        rows = parse_rows(text)
        tail = run.tail()
    by_bytes = {}
    for row in rows:
        if row.get("impl") != ("ddplaunch" if impl in ("tcp", "bucket") else impl):
            raise BenchError(f"{impl}: a result line says impl={row.get('impl')!r}")
        if row.get("ranks") != args.ranks:
            raise BenchError(f"{impl}: a result line says ranks={row.get('ranks')}, "
                             f"expected {args.ranks}")
        if row.get("correct") is not True:
            raise BenchError(f"{impl}: WRONG RESULT at {row.get('bytes')} bytes: {row}")
        by_bytes[int(row["bytes"])] = row
    element = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}[args.dtype]
    for size in args.sizes:
        expected = max(1, size // element) * element
        if expected not in by_bytes:
            raise BenchError(f"{impl}: no result for {expected} bytes" + tail)
    return by_bytes


def measure(args, env, log):
    """Alternating runs; {impl: {bytes: [row, ...]}}."""
    sides = ("ddplaunch", "torch", "bucket") if args.no_tcp else ("ddplaunch", "torch", "bucket", "tcp")
    samples = {impl: {} for impl in sides}
    with tempfile.TemporaryDirectory(prefix="allreduce-bench-") as tmp:
        for r in range(args.repeat):
            order = sides if r % 2 == 0 else tuple(reversed(sides))
            for impl in order:
                t0 = time.monotonic()
                rows = run_side(impl, args, env, tmp, r)
                for nbytes, row in rows.items():
                    samples[impl].setdefault(nbytes, []).append(row)
                log(f"  round {r + 1}/{args.repeat} {impl:9s} ({time.monotonic() - t0:.1f} s): "
                    + ", ".join(f"{human(b)} {row['seconds'] * 1e6:.0f} us"
                                for b, row in sorted(rows.items())))
    return samples


def summarize(samples, args):
    rows = []
    for nbytes in sorted(samples["ddplaunch"]):
        ours = samples["ddplaunch"][nbytes]
        peer = samples["torch"].get(nbytes, [])
        if not peer:
            continue
        ours_s = statistics.median(r["seconds"] for r in ours)
        peer_s = statistics.median(r["seconds"] for r in peer)
        bus = lambda s: nbytes / s / 1e9 * 2.0 * (args.ranks - 1) / args.ranks if s > 0 else 0.0
        ratio = peer_s / ours_s if ours_s > 0 else float("inf")
        tcp = samples.get("tcp", {}).get(nbytes, [])
        tcp_s = statistics.median(r["seconds"] for r in tcp) if tcp else None
        bucket = samples.get("bucket", {}).get(nbytes, [])
        bucket_s = statistics.median(r["seconds"] for r in bucket) if bucket else None
        targeted = nbytes >= TARGET_FROM_BYTES
        rows.append({
            "bytes": nbytes,
            "ddplaunch_seconds": ours_s,
            "torch_seconds": peer_s,
            "ratio": ratio,
            "ddplaunch_busbw_gbps": bus(ours_s),
            "torch_busbw_gbps": bus(peer_s),
            "target_ratio": TARGET_RATIO if targeted else None,
            "met": (ratio >= TARGET_RATIO) if targeted else None,
            "tcp_seconds": tcp_s,
            "tcp_ratio": (peer_s / tcp_s) if tcp_s else None,
            "bucket_seconds": bucket_s,
            "bucket_ratio": (peer_s / bucket_s) if bucket_s else None,
            "ddplaunch_samples_s": [r["seconds"] for r in ours],
            "torch_samples_s": [r["seconds"] for r in peer],
        })
    return rows


def format_table(rows):
    header = ["size", "ddplaunch us", "torch us", "ratio", "busbw ddplaunch GB/s",
              "busbw torch GB/s", "target", "met?", "bucket us (info)", "bucket ratio", "tcp us (info)",
              "tcp ratio"]
    lines = [header]
    for r in rows:
        tcp = r.get("tcp_seconds")
        bucket = r.get("bucket_seconds")
        lines.append([human(r["bytes"]), f"{r['ddplaunch_seconds'] * 1e6:.1f}",
                      f"{r['torch_seconds'] * 1e6:.1f}", f"{r['ratio']:.2f}x",
                      f"{r['ddplaunch_busbw_gbps']:.3f}", f"{r['torch_busbw_gbps']:.3f}",
                      f">= {r['target_ratio']:.1f}x" if r["target_ratio"] is not None else "(info)",
                      "-" if r["met"] is None else ("yes" if r["met"] else "NO"),
                      f"{bucket * 1e6:.1f}" if bucket else "-",
                      f"{r['bucket_ratio']:.2f}x" if bucket else "-",
                      f"{tcp * 1e6:.1f}" if tcp else "-",
                      f"{r['tcp_ratio']:.2f}x" if tcp else "-"])
    widths = [max(len(l[i]) for l in lines) for i in range(len(header))]
    out = [" | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(l, widths))) for l in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    return "\n".join(out)


# -------------------------------------------------------------------- main

def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2, help="processes (default 2)")
    p.add_argument("--sizes", default="1M,4M,16M,64M",
                   help="message sizes in bytes, comma-separated, K/M/G suffixes (default 1M,4M,16M,64M)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each side (median taken; default 3)")
    p.add_argument("--iters", type=int, default=10, help="timed all-reduces per size and run (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed all-reduces first (default 3)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "float16", "bfloat16"])
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds one run may take before it is killed and counts as failed (default 300)")
    p.add_argument("--json", action="store_true", help="also print one JSON document of all figures")
    p.add_argument("--no-tcp", action="store_true",
                   help="skip the informational run of the runtime over TCP (DDP_GLOO_SHM=0)")
    p.add_argument("--ddplaunch", default=os.environ.get("DDPLAUNCH_BIN") or
                   os.path.join(REPO_ROOT, "build", "launcher", "ddplaunch"),
                   help="ddplaunch binary (default: $DDPLAUNCH_BIN or build/launcher/ddplaunch)")
    p.add_argument("--ddpbench", default=os.environ.get("DDPBENCH_BIN") or
                   os.path.join(REPO_ROOT, "build", "worker", "ddpbench", "ddpbench"),
                   help="ddpbench binary (default: $DDPBENCH_BIN or build/worker/ddpbench/ddpbench)")
    p.add_argument("--python", default=os.environ.get("PYTHON_EXEC") or "/usr/bin/python3",
                   help="Python with torch for the peer (default: $PYTHON_EXEC or /usr/bin/python3)")
    args = p.parse_args(argv)
    try:
        args.sizes = [parse_size(s) for s in args.sizes.split(",") if s.strip()]
    except argparse.ArgumentTypeError as e:
        p.error(str(e))
    if not args.sizes:
        p.error("--sizes is empty")
    if args.ranks < 1 or args.repeat < 1 or args.iters < 1 or args.warmup < 0 or args.timeout <= 0:
        p.error("--ranks, --repeat, --iters and --timeout must be positive, --warmup >= 0")
    return args


def exit_on_signal(signum, _frame):
    # SystemExit unwinds through Run.__exit__, so an interrupted benchmark leaves
    # no launcher or worker behind.
    sys.exit(128 + signum)


def main(argv=None):
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, exit_on_signal)
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # progress, off stdout
    for what, path in (("ddplaunch", args.ddplaunch), ("ddpbench", args.ddpbench)):
        if not os.access(path, os.X_OK):
            log(f"allreduce_bench: error: no {what} binary at {path}")
            return 1

    env = dict(os.environ)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)  # an outer launcher must not leak into the runs
    env["OMP_NUM_THREADS"] = "1"
    env["PYTHON_EXEC"] = args.python
    env["PYTHONDONTWRITEBYTECODE"] = "1"

    log(f"allreduce_bench: {args.ranks} ranks, gloo, {args.dtype}, sizes "
        f"{', '.join(human(s) for s in args.sizes)}, {args.iters} iters + {args.warmup} warm-up, "
        f"{args.repeat} alternating runs of each side, OMP_NUM_THREADS=1")
    try:
        samples = measure(args, env, log)
    except BenchError as e:
        log(f"allreduce_bench: run failed: {e}")
        return 1
    rows = summarize(samples, args)
    print(f"all-reduce SUM, gloo, {args.dtype}, {args.ranks} ranks under ddplaunch, "
          f"median of {args.repeat} runs x {args.iters} iters; ratio = torch time / ddplaunch time "
          f"(> 1: ddplaunch faster)")
    print(format_table(rows))
    targeted = [r for r in rows if r["met"] is not None]
    all_met = all(r["met"] for r in targeted)
    print(f"targets: {sum(1 for r in targeted if r['met'])}/{len(targeted)} met"
          + ("" if all_met else " (target missed; exit 0: the runs themselves worked)"))
    if args.json:
        print(json.dumps({"bench": "allreduce_compare", "backend": "gloo", "ranks": args.ranks,
                          "dtype": args.dtype, "iters": args.iters, "warmup": args.warmup,
                          "repeat": args.repeat, "omp_num_threads": 1,
                          "target": {"ratio": TARGET_RATIO, "from_bytes": TARGET_FROM_BYTES},
                          "rows": rows, "all_met": all_met}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
