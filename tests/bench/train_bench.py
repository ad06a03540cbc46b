#!/usr/bin/python3
"""Benchmark one training step of ddptrain against PyTorch DDP.

Both sides train the same MLP (default --mlp-sizes 1024,2048,2048,1024,10, about
8.4 M parameters; the count is printed) on the same data file, with the same
per-rank batch, SGD, OMP_NUM_THREADS=1 and the same number of ranks, under the
same ddplaunch, on the CPU with Gloo:

  * ddptrain: `ddptrain --data-file F --log-every 1` (the runtime's DDP: bucketed
    all-reduce overlapped with backward); its per-step progress lines give rank 0's
    step times, its summary line the share of communication hidden behind backward;
  * torch:    tests/integration/workers/torch_ddp_mlp.py --bench (Debian's
    python3-torch, init_process_group("gloo"), nn.parallel.DistributedDataParallel),
    which prints rank 0's step times as JSON;
  * floor:    --ranks independent one-rank ddptrain jobs at once: the same
    compute and the same contention for cores and memory, no communication.
    No data-parallel step can beat it; step - floor is what DDP costs a side.

A step is the same work on both sides: gather the rank's slice of the batch,
zero_grad (gradients set to None, PyTorch 2's default), forward, cross-entropy,
backward (with the gradient all-reduce), optimizer step; after it both sides
average the loss over the ranks, outside the timed region. The first --warmup
steps of every run are not counted; a run's figure is the median of its
remaining steps; the two sides run alternately (--repeat times each, the order
flipped every round) and each side's figure is the median over its runs.

ratio = the median over rounds of ddptrain's step time / torch's in that round
(below 1: ddptrain faster); pairing the runs of a round cancels most of the
drift of a shared machine.

Both reducers get the same settings, one configuration per --bucket-cap-mb value
(default 25,8), and by default gradients that are views of the buckets on both
sides (ddptrain's default; gradient_as_bucket_view=True for PyTorch's DDP: no
copy of the gradients back out of the buckets). Both libraries make the same
buckets from a cap. 25 MiB is both libraries' default; with this model's three
big matrices (8, 16 and 8 MiB of gradients) it makes an 8 MiB bucket early in
backward and a 24 MiB one at its very end, so neither library can overlap much
there. 8 MiB makes three buckets (8, 16, 8 MiB), two of which fill while
backward goes on.
Targets: ratio <= 0.85, and most communication hidden (> 50 %).

Exit status: 0 when every run worked, whether or not the targets were met; 1 when
a run failed, hung (every run has a timeout, after which its launcher and workers
are killed) or printed no result; 2 on bad usage.

Usage: /usr/bin/python3 tests/bench/train_bench.py [--ranks N] [--mlp-sizes ...]
           [--batch-size B] [--steps S] [--warmup W] [--repeat R]
           [--bucket-cap-mb MB[,MB...]] [--no-grad-as-bucket-view] [--json]
"""
import argparse
import contextlib
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
REFERENCE = os.path.join(REPO_ROOT, "tests", "integration", "workers", "torch_ddp_mlp.py")

TARGET_RATIO = 0.85
TARGET_HIDDEN = 0.50
SIDES = ("ddptrain", "torch", "floor")

RANK0_RE = re.compile(r"^\[\d+:0\] (.*)$")
STEP_RE = re.compile(r"^step\s+(\d+)/(\d+)\s+loss\s+(\S+).*?step\s+([0-9.]+) ms\s+comm hidden\s+(\d+)%")
DONE_RE = re.compile(r"^ddptrain: done: .*step ([0-9.]+) ms, comm hidden (\d+)%")
PARAMS_RE = re.compile(r"^ddptrain: mlp, (\d+) parameters")


def parameter_count(sizes):
    return sum(a * b + b for a, b in zip(sizes, sizes[1:]))


def run_checked(cmd, env, tmp, name, timeout):
    """Runs cmd to completion; its stdout, or BenchError."""
    with Run(cmd, env, tmp, name) as run:
        rc = run.wait(timeout)
        if rc != 0:
            raise BenchError(f"{name}: {' '.join(run.cmd)}: exit code {rc}" + run.tail())
        return run.stdout(), run.tail()


# ------------------------------------------------------------ measurement

def rank0_lines(text):
    """Rank 0's lines of a ddplaunch run, its "[node:0] " prefix stripped."""
    return [m.group(1) for m in map(RANK0_RE.match, text.splitlines()) if m]


def training_args(args, data_file, side):
    """The options both sides take; only ddptrain needs telling that its
    gradients are not bucket views (its default is that they are)."""
    common = ["--mlp-sizes", ",".join(map(str, args.mlp_sizes)), "--data-file", data_file,
              "--batch-size", str(args.batch_size), "--steps", str(args.steps), "--lr", str(args.lr),
              "--bucket-cap-mb", str(args.bucket_cap_mb)]
    if args.grad_as_bucket_view:
        return common + ["--grad-as-bucket-view"]
    return common + (["--no-grad-as-bucket-view"] if side == "ddptrain" else [])


def launcher(args, tmp, ranks):
    return [args.ddplaunch, f"--nproc-per-node={ranks}", "--log-level", "warn",
            f"--log-dir={os.path.join(tmp, 'logs')}"]


def ddptrain_cmd(args, tmp, data_file, ranks):
    return (launcher(args, tmp, ranks) + [args.ddptrain]
            + training_args(args, data_file, "ddptrain") + ["--log-every", "1"] + args.ddptrain_args)


def parse_ddptrain(args, name, text, tail):
    """{step_s, hidden} from rank 0's progress lines of one ddptrain run."""
    steps, done, params = {}, None, None
    for line in rank0_lines(text):
        if (m := STEP_RE.match(line)):
            steps[int(m.group(1))] = float(m.group(4)) / 1e3
        elif (m := DONE_RE.match(line)):
            done = (float(m.group(1)) / 1e3, int(m.group(2)) / 100.0)
        elif (m := PARAMS_RE.match(line)):
            params = int(m.group(1))
    timed = [t for s, t in sorted(steps.items()) if s > args.warmup]
    if done is None or len(timed) != args.steps - args.warmup:
        raise BenchError(f"{name}: expected {args.steps} step lines and a summary line "
                         f"(got {len(steps)} steps, summary {'yes' if done else 'no'})" + tail)
    if params != parameter_count(args.mlp_sizes):
        raise BenchError(f"{name}: ddptrain says {params} parameters, expected "
                         f"{parameter_count(args.mlp_sizes)}" + tail)
    return {"step_s": statistics.median(timed), "summary_step_s": done[0], "hidden": done[1]}


def run_ddptrain(args, env, tmp, data_file, index):
    name = f"ddptrain_{index}"
    text, tail = run_checked(ddptrain_cmd(args, tmp, data_file, args.ranks), env, tmp, name, args.timeout)
    return parse_ddptrain(args, name, text, tail)


def run_floor(args, env, tmp, data_file, index):
    """The compute floor: --ranks independent one-rank ddptrain jobs at once.
    Each does a rank's whole step (same slice size, same threads, the same
    contention for cores and memory) but nothing is communicated, so a
    data-parallel step can be no faster than this."""
    names = [f"floor_{index}_{k}" for k in range(args.ranks)]
    runs = [Run(ddptrain_cmd(args, tmp, data_file, 1), env, tmp, n) for n in names]
    with contextlib.ExitStack() as stack:
        for run in runs:
            stack.enter_context(run)
        deadline = time.monotonic() + args.timeout
        results = []
        for name, run in zip(names, runs):
            rc = run.wait(max(1.0, deadline - time.monotonic()))
            if rc != 0:
                raise BenchError(f"{name}: {' '.join(run.cmd)}: exit code {rc}" + run.tail())
            results.append(parse_ddptrain(args, name, run.stdout(), run.tail())["step_s"])
    return {"step_s": statistics.fmean(results)}


def run_torch(args, env, tmp, data_file, index):
    name = f"torch_{index}"
    cmd = (launcher(args, tmp, args.ranks) + [args.python, REFERENCE, "--bench"]
           + training_args(args, data_file, "torch") + ["--warmup", str(args.warmup)])
    text, tail = run_checked(cmd, env, tmp, name, args.timeout)
    rows = []
    for line in rank0_lines(text):
        if line.startswith("{"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and row.get("bench") == "train":
                rows.append(row)
    if len(rows) != 1:
        raise BenchError(f"{name}: expected one JSON result line from rank 0, got {len(rows)}" + tail)
    row = rows[0]
    if row.get("ranks") != args.ranks or row.get("params") != parameter_count(args.mlp_sizes):
        raise BenchError(f"{name}: result for ranks={row.get('ranks')} params={row.get('params')}, expected "
                         f"{args.ranks} and {parameter_count(args.mlp_sizes)}" + tail)
    if row.get("threads") != 1:
        raise BenchError(f"{name}: torch ran with {row.get('threads')} threads, expected 1" + tail)
    return {"step_s": float(row["median_step_s"])}


def write_data(args, env, tmp):
    path = os.path.join(tmp, "data.pt")
    cmd = [args.python, REFERENCE, "--mlp-sizes", ",".join(map(str, args.mlp_sizes)),
           "--samples", str(args.samples), "--write-data", path]
    run_checked(cmd, env, tmp, "write_data", args.timeout)
    return path


def measure(args, env, log):
    """Alternating runs; {side: [result, ...]}."""
    samples = {side: [] for side in SIDES}
    runners = {"ddptrain": run_ddptrain, "torch": run_torch, "floor": run_floor}
    with tempfile.TemporaryDirectory(prefix="train-bench-") as tmp:
        data_file = write_data(args, env, tmp)
        for r in range(args.repeat):
            order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
            for side in order:
                t0 = time.monotonic()
                result = runners[side](args, env, tmp, data_file, r)
                samples[side].append(result)
                extra = f", comm hidden {result['hidden'] * 100:.0f}%" if "hidden" in result else ""
                log(f"  round {r + 1}/{args.repeat} {side:8s} ({time.monotonic() - t0:.1f} s): "
                    f"step {result['step_s'] * 1e3:.2f} ms{extra}")
    return samples


def summarize(samples, args):
    ours = statistics.median(r["step_s"] for r in samples["ddptrain"])
    theirs = statistics.median(r["step_s"] for r in samples["torch"])
    hidden = statistics.median(r["hidden"] for r in samples["ddptrain"])
    # The two runs of a round ran back to back, so their ratio cancels most of
    # this machine's drift; the median over rounds is the figure compared.
    paired = [a["step_s"] / b["step_s"] for a, b in zip(samples["ddptrain"], samples["torch"])]
    ratio = statistics.median(paired)
    floor = statistics.median(r["step_s"] for r in samples["floor"])
    global_batch = args.ranks * args.batch_size
    return {
        "ddptrain_step_s": ours, "torch_step_s": theirs, "ratio": ratio, "round_ratios": paired,
        "floor_step_s": floor, "floor_runs_s": [r["step_s"] for r in samples["floor"]],
        # What data parallelism costs above the compute floor, on each side.
        "ddptrain_overhead_s": ours - floor, "torch_overhead_s": theirs - floor,
        "ratio_of_medians": ours / theirs, "hidden": hidden,
        "ddptrain_samples_per_s": global_batch / ours if ours > 0 else 0.0,
        "torch_samples_per_s": global_batch / theirs if theirs > 0 else 0.0,
        "ratio_met": ratio <= TARGET_RATIO, "hidden_met": hidden > TARGET_HIDDEN,
        "ddptrain_runs_s": [r["step_s"] for r in samples["ddptrain"]],
        "torch_runs_s": [r["step_s"] for r in samples["torch"]],
        "ddptrain_hidden_runs": [r["hidden"] for r in samples["ddptrain"]],
    }


def format_table(s):
    def runs(values, scale=1e3, fmt="{:.1f}"):
        return " ".join(fmt.format(v * scale) for v in values)
    header = ["impl", "step ms (median)", "samples/s", "per round", "comm hidden", "target", "met?"]
    lines = [header,
             ["ddptrain", f"{s['ddptrain_step_s'] * 1e3:.2f}", f"{s['ddptrain_samples_per_s']:.0f}",
              runs(s["ddptrain_runs_s"]), f"{s['hidden'] * 100:.0f}%",
              f"hidden > {TARGET_HIDDEN * 100:.0f}%", "yes" if s["hidden_met"] else "NO"],
             ["torch DDP", f"{s['torch_step_s'] * 1e3:.2f}", f"{s['torch_samples_per_s']:.0f}",
              runs(s["torch_runs_s"]), "-", "-", "-"],
             ["floor (no comm)", f"{s['floor_step_s'] * 1e3:.2f}", "", runs(s["floor_runs_s"]), "-", "-", "-"],
             ["ratio", f"{s['ratio']:.2f}x", "", runs(s["round_ratios"], 1, "{:.2f}"), "",
              f"<= {TARGET_RATIO:.2f}x", "yes" if s["ratio_met"] else "NO"]]
    widths = [max(len(l[i]) for l in lines) for i in range(len(header))]
    out = [" | ".join(c.ljust(w) if i == 0 else c.rjust(w)
                      for i, (c, w) in enumerate(zip(l, widths))) for l in lines]
    out.insert(1, "-+-".join("-" * w for w in widths))
    out.append(f"above the floor: ddptrain +{s['ddptrain_overhead_s'] * 1e3:.1f} ms, "
               f"torch DDP +{s['torch_overhead_s'] * 1e3:.1f} ms per step")
    return "\n".join(out)


# -------------------------------------------------------------------- main

def parse_sizes(text):
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if len(sizes) < 2 or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"bad --mlp-sizes {text!r} (e.g. 1024,2048,2048,1024,10)")
    return sizes


def parse_caps(text):
    try:
        caps = [float(c) for c in text.split(",")]
    except ValueError:
        caps = []
    if not caps or any(not c > 0 for c in caps):
        raise argparse.ArgumentTypeError(f"bad --bucket-cap-mb {text!r} (e.g. 25,8)")
    return caps


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2, help="processes (default 2)")
    p.add_argument("--mlp-sizes", type=parse_sizes, default=parse_sizes("1024,2048,2048,1024,10"),
                   help="MLP layer sizes (default 1024,2048,2048,1024,10: about 8.4 M parameters)")
    p.add_argument("--batch-size", type=int, default=64, help="samples per rank and step (default 64)")
    p.add_argument("--steps", type=int, default=20, help="steps per run, warm-up included (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="steps not counted (default 5)")
    p.add_argument("--repeat", type=int, default=5, help="rounds: runs of each side (median taken; default 5)")
    p.add_argument("--samples", type=int, default=1024, help="samples in the data file (default 1024)")
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (default 0.01)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds one run may take before it is killed and counts as failed (default 300)")
    p.add_argument("--bucket-cap-mb", type=parse_caps, default=parse_caps("25,8"), metavar="MB[,MB...]",
                   help="bucket caps of both sides' reducers, one configuration each (default 25,8: both "
                        "libraries' default, then one that splits this model's gradients into 3 buckets)")
    p.add_argument("--no-grad-as-bucket-view", dest="grad_as_bucket_view", action="store_false",
                   help="gradients are not views of the buckets on either side (by default they are on "
                        "both: ddptrain's default, DDP's gradient_as_bucket_view=True)")
    p.add_argument("--ddptrain-args", default="",
                   help="extra ddptrain options, space-separated (e.g. --ddptrain-args='--first-bucket-mb 2')")
    p.add_argument("--json", action="store_true", help="also print one JSON document of all figures")
    p.add_argument("--ddplaunch", default=os.environ.get("DDPLAUNCH_BIN") or
                   os.path.join(REPO_ROOT, "build", "launcher", "ddplaunch"),
                   help="ddplaunch binary (default: $DDPLAUNCH_BIN or build/launcher/ddplaunch)")
    p.add_argument("--ddptrain", default=os.environ.get("DDPTRAIN_BIN") or
                   os.path.join(REPO_ROOT, "build", "worker", "ddptrain", "ddptrain"),
                   help="ddptrain binary (default: $DDPTRAIN_BIN or build/worker/ddptrain/ddptrain)")
    p.add_argument("--python", default=os.environ.get("PYTHON_EXEC") or "/usr/bin/python3",
                   help="Python with torch for the reference (default: $PYTHON_EXEC or /usr/bin/python3)")
    args = p.parse_args(argv)
    if min(args.ranks, args.batch_size, args.repeat, args.samples) < 1 or args.warmup < 0 \
            or args.timeout <= 0 or not args.lr > 0:
        p.error("--ranks, --batch-size, --repeat, --samples, --lr and --timeout must be positive, "
                "--warmup >= 0")
    if args.steps <= args.warmup:
        p.error("--steps must be larger than --warmup")
    args.ddptrain_args = args.ddptrain_args.split()
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
    for what, path in (("ddplaunch", args.ddplaunch), ("ddptrain", args.ddptrain)):
        if not os.access(path, os.X_OK):
            log(f"train_bench: error: no {what} binary at {path}")
            return 1

    env = dict(os.environ)
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RESTART_COUNT"):
        env.pop(k, None)  # an outer launcher must not leak into the runs
    env["OMP_NUM_THREADS"] = "1"
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env["PYTHON_EXEC"] = args.python
    env["PYTHONDONTWRITEBYTECODE"] = "1"

    params = parameter_count(args.mlp_sizes)
    sizes = ",".join(map(str, args.mlp_sizes))
    log(f"train_bench: MLP {sizes} ({params:,} parameters), {args.ranks} ranks x batch {args.batch_size}, "
        f"gloo on cpu, OMP_NUM_THREADS=1, {args.steps} steps per run ({args.warmup} warm-up), "
        f"{args.repeat} alternating runs of each side")
    documents = []
    for cap in args.bucket_cap_mb:
        config = argparse.Namespace(**{**vars(args), "bucket_cap_mb": cap})
        view = f", gradient_as_bucket_view={args.grad_as_bucket_view}"
        log(f"configuration: bucket_cap_mb={cap:g}{view} on both sides")
        try:
            samples = measure(config, env, log)
        except BenchError as e:
            log(f"train_bench: run failed: {e}")
            return 1
        s = summarize(samples, config)
        met = s["ratio_met"] and s["hidden_met"]
        print(f"\ntraining step, MLP {sizes} ({params:,} parameters, {params * 4 / 2**20:.1f} MiB of fp32 "
              f"gradients), SGD, {args.ranks} ranks x batch {args.batch_size}, gloo on cpu, OMP_NUM_THREADS=1, "
              f"bucket_cap_mb={cap:g}{view} on both sides; median of {args.repeat} runs x "
              f"{args.steps - args.warmup} steps; ratio = median over rounds of ddptrain step time / torch "
              f"step time (< 1: ddptrain faster)")
        print(f"targets: {int(s['ratio_met']) + int(s['hidden_met'])}/2 met"
              + ("" if met else " (target missed; exit 0: the runs themselves worked)"))
        print(format_table(s))
        documents.append({"bucket_cap_mb": cap, "grad_as_bucket_view": args.grad_as_bucket_view, **s})
    if args.json:
        print(json.dumps({"bench": "train_compare", "backend": "gloo", "device": "cpu", "ranks": args.ranks,
                          "mlp_sizes": args.mlp_sizes, "parameters": params, "batch_size": args.batch_size,
                          "steps": args.steps, "warmup": args.warmup, "repeat": args.repeat,
                          "omp_num_threads": 1, "ddptrain_args": args.ddptrain_args,
                          "target": {"ratio": TARGET_RATIO, "hidden": TARGET_HIDDEN},
                          "configurations": documents}))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
