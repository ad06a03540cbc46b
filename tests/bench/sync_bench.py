#!/usr/bin/python3
"""Benchmark: --sync DIR=s3://BUCKET/PREFIX, ddplaunch's checkpoint upload, vs
`aws s3 cp --recursive`, and what it costs a PyTorch DDP step.

Both parts run against tests/integration/s3_server.py's S3Server (s3rver, a real
S3-compatible server checking SigV4, on the loopback; it shares this machine's cores).

1. Upload throughput. One set of files (--big-files of --big-mib MiB and
   --small-files of --small-mib MiB, random bytes, written once) goes up, --repeat
   rounds, alternated (the order flips every round):
   - ddplaunch: a real job, `ddplaunch --nproc-per-node=1 --sync DIR=s3://B/ddp-N/`,
     whose one worker (this file, `_rename`) renames the files into DIR, as a trainer
     renames a finished checkpoint into place, and exits. The time runs from just
     before the first rename to ddplaunch's closing `--sync ...: N file(s) uploaded`
     line (its own timestamp): what a user waits for, including the second of quiet a
     file must show before it goes up and the sequential uploads (multipart above
     8 MiB). ddplaunch's own figure (bytes / time spent uploading) is shown beside it.
   - aws: `/usr/bin/aws s3 cp --recursive DIR s3://B/aws-N/` (AWS CLI v2, its defaults:
     10 concurrent requests, multipart above 8 MiB in 8 MiB parts), timed as a process,
     so including its Python start (about a second).
   After each run the server's objects are read back over HTTP and compared byte for
   byte with the files. Reported: median MiB/s of each, the ratio ddplaunch/aws.
2. Step-time overhead. A PyTorch DDP script (this file, `_train`: Gloo on the CPU,
   --nproc ranks, an MLP, SGD) trains --steps steps and saves a checkpoint (model and
   optimizer, torch.save to a temp name + os.replace, rank 0) every --ckpt-every steps;
   it runs under ddplaunch with --sync on and off, alternated, --repeat rounds. Rank 0's
   mean step time (checkpoint steps included, --warmup steps not) per run; reported:
   the median of each side, each round's overhead (its two runs, back to back) and
   their median, the overhead %. Target: < 2%. Beside it, the CPU seconds each run's
   launcher used (its zombie's /proc stat, ranks apart), so --sync's own CPU shows
   as a share of the ranks', and what the server used meanwhile. The S3 server stands for
   storage on another machine: here its threads run SCHED_IDLE, so that what it
   costs to receive the uploads does not count as ddplaunch's overhead.

Usage: /usr/bin/python3 tests/bench/sync_bench.py [--repeat 3] [--big-files 4]
         [--big-mib 64] [--small-files 20] [--small-mib 1] [--steps 400]
         [--ckpt-every 50] [--width 1024] [--nproc 2] [--skip-train | --skip-upload]
         [--quick] [--json]
Exits 0 when every run worked and every upload is byte-equal, 1 otherwise; 2 when the
S3 server or the AWS CLI is missing. The table comes last.
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
from bench_runs import LAUNCHER_VARS, BenchError, Run  # noqa: E402

DDPLAUNCH = os.environ.get("DDPLAUNCH_BIN") or os.path.join(REPO, "build", "launcher", "ddplaunch")
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"
AWS = "/usr/bin/aws"   # not `aws` on PATH: that may be a pyenv shim
MIB = 1 << 20
TARGET_PERCENT = 2.0
REPORT_RE = re.compile(r"\[ddplaunch (\d\d):(\d\d):(\d\d)\.(\d{3})\] info: --sync (\S+): (\d+) file\(s\) uploaded "
                       r"\(([\d.]+) (\w+)(?: at ([\d.]+) MiB/s)?\), (\d+) pending")
T0_RE = re.compile(r"^\[0:0\] first_rename=([\d.]+)$", re.M)
STEP_RE = re.compile(r"^\[0:0\] step_ms=([\d.]+) steps=(\d+) ckpts=(\d+) ckpt_mib=([\d.]+)$", re.M)


# ----------------------------------------------------------------- the workers

def worker_rename(src, dst):
    """Renames every file of src into dst (sorted), then exits."""
    names = sorted(os.listdir(src))
    print(f"first_rename={time.time():.6f}", flush=True)
    for n in names:
        os.replace(os.path.join(src, n), os.path.join(dst, n))
    return 0


def worker_train(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--width", type=int, default=1024)
    a = ap.parse_args(argv)
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    w = a.width
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, w), torch.nn.ReLU(), torch.nn.Linear(w, w),
                                    torch.nn.ReLU(), torch.nn.Linear(w, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    ckpts, ckpt_bytes, start = 0, 0, None
    for step in range(1, a.steps + 1):
        if step == a.warmup + 1:
            start = time.perf_counter()
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if rank == 0 and step % a.ckpt_every == 0:
            path = os.path.join(a.dir, f"step_{step}.pt")
            torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
            ckpts, ckpt_bytes = ckpts + 1, os.path.getsize(path)
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"step_ms={elapsed * 1e3 / (a.steps - a.warmup):.4f} steps={a.steps - a.warmup} ckpts={ckpts} "
              f"ckpt_mib={ckpt_bytes / MIB:.2f}", flush=True)
    dist.destroy_process_group()
    return 0


# ----------------------------------------------------------------- the bench

def clean_env(s3):
    """This environment without launcher variables or the caller's AWS settings, plus the server's."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and not k.startswith("AWS_")}
    env.update(s3.env(), HOME=env.get("HOME", "/nonexistent"), PYTHON_EXEC=PYTHON, OMP_NUM_THREADS="1",
               AWS_SHARED_CREDENTIALS_FILE="/nonexistent", AWS_CONFIG_FILE="/nonexistent")
    return env


def report_epoch(m, near):
    """The epoch of a `[ddplaunch HH:MM:SS.mmm]` stamp (local time), the one closest after `near`."""
    day = datetime.datetime.fromtimestamp(near).replace(hour=0, minute=0, second=0, microsecond=0)
    t = day.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=int(m.group(3)),
                    microsecond=int(m.group(4)) * 1000).timestamp()
    return t + 86400 if t < near - 3600 else t


def verify(s3, prefix, digests):
    """The server holds exactly the files, byte for byte, under prefix; else BenchError."""
    objs = s3.objects(prefix)
    got = {k[len(prefix):]: hashlib.sha256(v).hexdigest() for k, v in objs.items()}
    if got != digests:
        missing = sorted(set(digests) - set(got))
        extra = sorted(set(got) - set(digests))
        differ = sorted(k for k in set(got) & set(digests) if got[k] != digests[k])
        raise BenchError(f"s3://{s3.bucket}/{prefix}: missing {missing[:5]}, unexpected {extra[:5]}, "
                         f"different bytes {differ[:5]}")


def upload_ddplaunch(s3, env, tmp, data, n, total):
    sync_dir = os.path.join(tmp, f"ddp-{n}")
    os.mkdir(sync_dir)
    prefix = f"ddp-{n}/"
    cmd = [DDPLAUNCH, "--nproc-per-node=1", f"--log-dir={os.path.join(tmp, 'logs')}", "--sync",
           f"{sync_dir}=s3://{s3.bucket}/{prefix}", os.path.abspath(__file__), "_rename", data, sync_dir]
    try:
        with Run(cmd, env, tmp, f"upload-ddp-{n}") as run:
            rc = run.wait(600)
            out = run.stdout()
            with open(run.err_path, errors="replace") as f:
                err = f.read()
            t0, rep = T0_RE.search(out), REPORT_RE.search(err)
            if rc != 0 or not t0 or not rep or int(rep.group(6)) != len(os.listdir(sync_dir)) or rep.group(10) != "0":
                raise BenchError(f"ddplaunch --sync run {n} (exit {rc}): no complete upload report" + run.tail())
    finally:
        for name in os.listdir(sync_dir):          # the files back, for the next run
            os.replace(os.path.join(sync_dir, name), os.path.join(data, name))
        os.rmdir(sync_dir)
    start = float(t0.group(1))
    secs = report_epoch(rep, start) - start
    return prefix, {"seconds": secs, "mib_s": total / MIB / secs,
                    "reported_mib_s": float(rep.group(9)) if rep.group(9) else None}


def upload_aws(s3, env, tmp, data, n, total):
    prefix = f"aws-{n}/"
    cfg = os.path.join(tmp, "aws-config")
    with open(cfg, "w") as f:
        f.write("[default]\ns3 =\n  addressing_style = path\n")
    env = dict(env, AWS_CONFIG_FILE=cfg, AWS_EC2_METADATA_DISABLED="true", AWS_PAGER="")
    env.pop("AWS_ENDPOINT_URL", None)   # only aws-cli >= 2.13 reads it: --endpoint-url instead
    cmd = [AWS, "s3", "cp", "--recursive", "--only-show-errors", "--endpoint-url", s3.endpoint, data,
           f"s3://{s3.bucket}/{prefix}"]
    with Run(cmd, env, tmp, f"upload-aws-{n}") as run:
        start = time.time()
        rc = run.wait(600)
        secs = time.time() - start
        if rc != 0:
            raise BenchError(f"aws s3 cp run {n} exited {rc}" + run.tail())
    return prefix, {"seconds": secs, "mib_s": total / MIB / secs}


def measure_upload(args, s3, env, tmp):
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    digests = {}
    sizes = [(f"big_{i:02d}.bin", args.big_mib) for i in range(args.big_files)] + \
            [(f"small_{i:02d}.bin", args.small_mib) for i in range(args.small_files)]
    for name, mib in sizes:
        blob = os.urandom(int(mib * MIB))
        with open(os.path.join(data, name), "wb") as f:
            f.write(blob)
        digests[name] = hashlib.sha256(blob).hexdigest()
    total = sum(os.path.getsize(os.path.join(data, n)) for n in digests)
    runs = {"ddplaunch": [], "aws": []}
    sides = {"ddplaunch": upload_ddplaunch, "aws": upload_aws}
    for i in range(args.repeat):
        for side in (("ddplaunch", "aws") if i % 2 == 0 else ("aws", "ddplaunch")):
            prefix, r = sides[side](s3, env, tmp, data, i, total)
            verify(s3, prefix, digests)
            runs[side].append(r)
            print(f"  upload round {i + 1} {side:9s} {r['mib_s']:8.1f} MiB/s ({r['seconds']:.2f} s)", flush=True)
    shutil.rmtree(data)
    med = statistics.median
    ours, theirs = med(r["mib_s"] for r in runs["ddplaunch"]), med(r["mib_s"] for r in runs["aws"])
    reported = [r["reported_mib_s"] for r in runs["ddplaunch"] if r["reported_mib_s"]]
    return {"files": len(digests), "bytes": total, "ddplaunch_mib_s": ours, "aws_mib_s": theirs,
            "ratio": ours / theirs, "ddplaunch_reported_mib_s": med(reported) if reported else None,
            "ddplaunch_seconds": med(r["seconds"] for r in runs["ddplaunch"]),
            "aws_seconds": med(r["seconds"] for r in runs["aws"]), "runs": runs}


def train_once(args, s3, env, tmp, n, sync):
    ckpt = os.path.join(tmp, f"ckpt-{n}-{'on' if sync else 'off'}")
    os.mkdir(ckpt)
    cmd = [DDPLAUNCH, f"--nproc-per-node={args.nproc}", f"--log-dir={os.path.join(tmp, 'logs')}"]
    if sync:
        cmd += ["--sync", f"{ckpt}=s3://{s3.bucket}/train-{n}/"]
    cmd += [os.path.abspath(__file__), "_train", "--dir", ckpt, "--steps", str(args.steps), "--warmup",
            str(args.warmup), "--ckpt-every", str(args.ckpt_every), "--width", str(args.width)]
    server_before = cpu_seconds(s3.pid)[0]
    with Run(cmd, env, tmp, f"train-{n}-{sync}") as run:
        rc, launcher_cpu, ranks_cpu = wait_keeping_cpu(run, 900)
        server_cpu = cpu_seconds(s3.pid)[0] - server_before
        m = STEP_RE.search(run.stdout())
        if rc != 0 or not m:
            raise BenchError(f"training run {n} (--sync {'on' if sync else 'off'}) exited {rc}" + run.tail())
        with open(run.err_path, errors="replace") as f:
            rep = REPORT_RE.search(f.read())
    if sync:
        expected = {f: hashlib.sha256(open(os.path.join(ckpt, f), "rb").read()).hexdigest()
                    for f in os.listdir(ckpt)}
        if not rep or rep.group(10) != "0":
            raise BenchError(f"training run {n}: no complete --sync report" + run.tail())
        verify(s3, f"train-{n}/", expected)
    shutil.rmtree(ckpt)
    return {"step_ms": float(m.group(1)), "ckpts": int(m.group(3)), "ckpt_mib": float(m.group(4)),
            "launcher_cpu_s": launcher_cpu, "ranks_cpu_s": ranks_cpu, "server_cpu_s": server_cpu}


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """(own, reaped children's) CPU seconds of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(v) for v in fields[11:15])
    return (utime + stime) / CLOCK_TICKS, (cutime + cstime) / CLOCK_TICKS


def wait_keeping_cpu(run, timeout):
    """Waits for the launcher to exit without reaping it, reads what its zombie
    says it used (its own threads; its ranks, which it reaped), then reaps it.
    Returns (exit code, launcher CPU s, ranks' CPU s)."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, run.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() > deadline:
            return run.wait(0), None, None   # raises BenchError: still running
        time.sleep(0.05)
    own, ranks = cpu_seconds(run.proc.pid)
    return run.wait(10), own, ranks


def as_remote_server(pid):
    """The S3 server stands for storage on another machine: in the step-time part
    its threads run SCHED_IDLE, on what the training leaves of this machine's cores,
    so that the overhead measured is ddplaunch's, not the server's receiving."""
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setscheduler(int(task), os.SCHED_IDLE, os.sched_param(0))
        except ProcessLookupError:
            pass  # a thread that ended meanwhile; new ones inherit the policy


def measure_steps(args, s3, env, tmp):
    as_remote_server(s3.pid)
    runs = {True: [], False: []}
    for i in range(args.repeat):
        for sync in ((True, False) if i % 2 == 0 else (False, True)):
            r = train_once(args, s3, env, tmp, i, sync)
            runs[sync].append(r)
            print(f"  train round {i + 1} --sync {'on ' if sync else 'off'} {r['step_ms']:8.3f} ms/step; CPU s: "
                  f"ddplaunch {r['launcher_cpu_s']:.2f}, ranks {r['ranks_cpu_s']:.2f}, "
                  f"S3 server {r['server_cpu_s']:.2f}", flush=True)
    med = statistics.median
    on, off = med(r["step_ms"] for r in runs[True]), med(r["step_ms"] for r in runs[False])
    # The two runs of a round ran back to back: their ratio leaves out how the
    # machine drifts between rounds, which the medians of each side keep.
    paired = [(a["step_ms"] / b["step_ms"] - 1) * 100 for a, b in zip(runs[True], runs[False])]
    overhead = med(paired)
    # What --sync costs in CPU, apart from the step times: the launcher's own
    # CPU with it minus without, against the ranks' CPU; and what the loopback
    # server (which would be on another machine) took from the same cores.
    cpu = {key: {side: med(r[key] for r in runs[side]) for side in (True, False)}
           for key in ("launcher_cpu_s", "ranks_cpu_s", "server_cpu_s")}
    sync_cpu = cpu["launcher_cpu_s"][True] - cpu["launcher_cpu_s"][False]
    return {"step_ms_sync": on, "step_ms_no_sync": off, "overhead_percent": overhead,
            "unpaired_overhead_percent": (on / off - 1) * 100, "round_overheads_percent": paired,
            "launcher_cpu_s_sync": cpu["launcher_cpu_s"][True], "launcher_cpu_s_no_sync": cpu["launcher_cpu_s"][False],
            "ranks_cpu_s_sync": cpu["ranks_cpu_s"][True], "sync_cpu_percent_of_ranks":
                sync_cpu / cpu["ranks_cpu_s"][True] * 100, "server_cpu_s_sync": cpu["server_cpu_s"][True],
            "met": overhead < TARGET_PERCENT, "ckpts_per_run": runs[True][0]["ckpts"],
            "ckpt_mib": runs[True][0]["ckpt_mib"],
            "runs": {"sync": [r["step_ms"] for r in runs[True]], "no_sync": [r["step_ms"] for r in runs[False]]}}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "_rename":
        return worker_rename(sys.argv[2], sys.argv[3])
    if len(sys.argv) > 1 and sys.argv[1] == "_train":
        return worker_train(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--big-files", type=int, default=4)
    ap.add_argument("--big-mib", type=float, default=64)
    ap.add_argument("--small-files", type=int, default=20)
    ap.add_argument("--small-mib", type=float, default=1)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--skip-train", action="store_true", help="only the upload part")
    ap.add_argument("--skip-upload", action="store_true", help="only the step-time part")
    ap.add_argument("--quick", action="store_true", help="small sizes, one round (for CI)")
    ap.add_argument("--json", action="store_true")
    if ap.parse_args().quick:   # smaller defaults; options given still win
        ap.set_defaults(repeat=1, big_files=2, big_mib=9, small_files=4, steps=60, warmup=10, ckpt_every=20,
                        width=256)
    args = ap.parse_args()
    if not os.access(AWS, os.X_OK):
        print(f"sync_bench: {AWS} (AWS CLI v2) is missing", file=sys.stderr)
        return 2
    from s3_server import S3Server, S3ServerError
    with tempfile.TemporaryDirectory(prefix="sync-bench-") as tmp:
        try:
            s3 = S3Server(bucket="sync-bench").start()
        except S3ServerError as e:
            print(f"sync_bench: {e}", file=sys.stderr)
            return 2
        try:
            env = clean_env(s3)
            upload = None if args.skip_upload else measure_upload(args, s3, env, tmp)
            steps = None if args.skip_train else measure_steps(args, s3, env, tmp)
        except (BenchError, subprocess.TimeoutExpired) as e:
            print(f"sync_bench: {e}", file=sys.stderr)
            return 1
        finally:
            s3.close()
    if args.json:
        print(json.dumps({"upload": upload, "steps": steps, "repeat": args.repeat, "nproc": args.nproc,
                          "target_percent": TARGET_PERCENT}))
    if upload:
        print(f"Upload to S3 on the loopback (s3rver), {upload['files']} files, {upload['bytes'] / MIB:.0f} MiB, "
              f"median of {args.repeat} rounds, all byte-equal on the server")
        print(f"  ddplaunch --sync (rename -> report) {upload['ddplaunch_mib_s']:8.1f} MiB/s "
              f"({upload['ddplaunch_seconds']:.2f} s; its own figure "
              f"{upload['ddplaunch_reported_mib_s'] or 0:.1f} MiB/s)")
        print(f"  aws s3 cp --recursive               {upload['aws_mib_s']:8.1f} MiB/s ({upload['aws_seconds']:.2f} s)")
        print(f"  ratio ddplaunch/aws                 {upload['ratio']:8.3f}")
    if steps:
        print(f"PyTorch DDP step time, rank 0, {args.nproc} ranks (Gloo, CPU), width {args.width}, a "
              f"{steps['ckpt_mib']:.1f} MiB checkpoint every {args.ckpt_every} steps "
              f"({steps['ckpts_per_run']} per run), median of {args.repeat} rounds")
        print(f"  --sync on                           {steps['step_ms_sync']:8.3f} ms")
        print(f"  --sync off                          {steps['step_ms_no_sync']:8.3f} ms")
        print(f"  rounds' overheads (on/off - 1)      " +
              " ".join(f"{p:+.2f}%" for p in steps["round_overheads_percent"]))
        print(f"  overhead, median of the rounds'     {steps['overhead_percent']:+8.2f}%  (target < "
              f"{TARGET_PERCENT:g}%: {'met' if steps['met'] else 'NOT met'})")
        print(f"  (median on / median off - 1         {steps['unpaired_overhead_percent']:+8.2f}%)")
        print(f"  ddplaunch's CPU per run, on / off   {steps['launcher_cpu_s_sync']:8.2f} / "
              f"{steps['launcher_cpu_s_no_sync']:.2f} s: --sync's own "
              f"{steps['sync_cpu_percent_of_ranks']:+.2f}% of the ranks' {steps['ranks_cpu_s_sync']:.2f} s")
        print(f"  the loopback S3 server's CPU, on    {steps['server_cpu_s_sync']:8.2f} s per run "
              f"(SCHED_IDLE; storage elsewhere in a real job)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
