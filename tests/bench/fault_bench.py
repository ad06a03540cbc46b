#!/usr/bin/python3
"""Benchmark: time from a fault to the launcher's report, ddplaunch vs torchrun.

Scenarios (one node, --nproc ranks on the CPU, Gloo, rank --fault-rank faulty at step
--fault-step):

  crash  the faulty rank aborts (SIGABRT).
  hang   the faulty rank stops making progress but stays alive; the others wait in
         the step's all-reduce.
           ddplaunch: ddptrain --inject-fault hang@K:R, --hang-timeout 3 (default
                      --heartbeat-interval 1 s): the coordinator names the culprit.
           torchrun:  PyTorch DDP (tests/integration/workers/torch_ddp_fault.py) with
                      init_process_group(timeout=--torch-timeout, default 60 s): the
                      waiting ranks fail only when Gloo's own collective timeout expires,
                      then torchrun notices (its --monitor_interval, default 5 s) and
                      reports. torchrun never sees the hung rank itself.
  p2p-hang  a pipeline whose ranks only send and receive (tests/integration/workers/
         torch_pipeline_trouble.py, a plain PyTorch script, under both launchers): the
         faulty stage sleeps; the stages after it wait in recv, those before it in
         their gradients' irecv.
           ddplaunch: the Python companion's heartbeats count the sends and receives
                      that complete; no progress for --hang-timeout names the stage in
                      no send or receive.
           torchrun:  Gloo's send/recv time out after init_process_group(timeout=
                      --torch-timeout), the waiting stages raise, torchrun reports.

"Fault to report" is measured with this script's clock on the launcher's combined
stdout+stderr, read line by line from a pipe: from the moment the faulty rank's fault line
arrives ("ddptrain: injected fault at step N" / "torch_ddp_fault: injected fault at step
N (..., unix time T)" / "torch_pipeline_trouble: stall at step N") to the moment the launcher's failure report arrives (ddplaunch: its
"error:" line naming the rank, i.e. "rank R ... failed" or "stuck_collective/silent_rank
detected: rank R"; torchrun: the first line mentioning ChildFailedError, or its exit if
there is none). The "culprit" column says whether that report names the faulty rank
(torchrun: the "Root Cause" rank). Each figure is the median of --repeat runs.

torchrun is Debian's torch 1.13 one, run through tests/bench/torchrun_shim.py (see
launch_bench.py) at its default --monitor_interval, with underscore option spellings.

Exits 0 when every run worked (fault seen, report seen, expected exit code, nothing
left running), 1 otherwise. The table comes last.

Usage: /usr/bin/python3 tests/bench/fault_bench.py [--repeat 3] [--torch-timeout 60]
         [--nproc 3] [--skip-torch] [--json]
"""
import argparse
import json
import os
import re
import secrets
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_runs import LAUNCHER_VARS, TOKEN_VAR, BenchError, free_port, kill_marked, marked_pids  # noqa: E402
REPO = os.path.dirname(os.path.dirname(HERE))
SHIM = os.path.join(HERE, "torchrun_shim.py")
TORCH_SCRIPT = os.path.join(REPO, "tests", "integration", "workers", "torch_ddp_fault.py")
PIPELINE_SCRIPT = os.path.join(REPO, "tests", "integration", "workers", "torch_pipeline_trouble.py")
DDPLAUNCH = os.environ.get("DDPLAUNCH_BIN") or os.path.join(REPO, "build", "launcher", "ddplaunch")
DDPTRAIN = os.environ.get("DDPTRAIN_BIN") or os.path.join(REPO, "build", "worker", "ddptrain", "ddptrain")
PYTHON = os.environ.get("PYTHON_EXEC") or "/usr/bin/python3"

FAULT_RE = re.compile(r"(?:ddptrain|torch_ddp_fault): injected fault at step (\d+)|"
                      r"torch_pipeline_trouble: stall at step (\d+)")
DDP_REPORT_RE = re.compile(r"\] error: (?:rank (\d+) \(node \d+.*\bfailed\b|"
                           r"(?:stuck_collective|silent_rank|desync) detected: "
                           r"(?:no progress for [\d.]+ s \(hang timeout [\d.]+ s\): )?rank (\d+))")
TORCH_REPORT_RE = re.compile(r"ChildFailedError")
TORCH_ROOT_RANK_RE = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)



def run_once(cmd, env, report_re, timeout):
    """Runs cmd in its own session, reading its combined output line by line.
    Returns a dict of monotonic times (fault, report, exit), rc and the text."""
    token = secrets.token_hex(8)
    env = dict(env, **{TOKEN_VAR: token})
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, env=env, start_new_session=True)
    fd = proc.stdout.fileno()
    buf, lines = b"", []
    t_fault = t_report = t_exit = None
    report_line = None
    try:
        deadline = t0 + timeout
        eof = False
        while not eof and time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if not r:
                continue
            chunk = os.read(fd, 65536)
            now = time.monotonic()
            if not chunk:
                eof = True
                break
            buf += chunk
            *complete, buf = buf.split(b"\n")
            for raw in complete:
                line = raw.decode("utf-8", "replace")
                lines.append(line)
                if t_fault is None and FAULT_RE.search(line):
                    t_fault = now
                if t_report is None and t_fault is not None and report_re.search(line):
                    t_report, report_line = now, line
        try:
            rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            t_exit = time.monotonic()
        except subprocess.TimeoutExpired:
            rc = None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.kill()
        proc.wait()
        proc.stdout.close()
        time.sleep(0.3)          # the launcher's own teardown, if it is still finishing
        leftovers = marked_pids(token)
        kill_marked(token)
    if buf:
        lines.append(buf.decode("utf-8", "replace"))
    return {"rc": rc, "t0": t0, "fault": t_fault, "report": t_report, "exit": t_exit,
            "report_line": report_line, "text": "\n".join(lines), "leftovers": leftovers,
            "elapsed": (t_exit or time.monotonic()) - t0}


def ddplaunch_case(args, kind, tmp):
    cmd = [DDPLAUNCH, f"--nproc-per-node={args.nproc}", f"--hang-timeout={args.hang_timeout:g}",
           f"--log-dir={tmp}", f"--rdzv-id=faultbench-{secrets.token_hex(4)}"]
    if kind == "python-hang":
        # torchrun's hang peer, the same PyTorch script: diagnosed through the Python companion.
        cmd += [TORCH_SCRIPT, "--fault", f"hang@{args.fault_step}:{args.fault_rank}",
                "--torch-timeout", f"{args.torch_timeout:g}"]
    elif kind == "p2p-hang":
        cmd += pipeline_script(args)
    else:
        cmd += [DDPTRAIN, "--steps", "100000000", "--log-every", "0", "--inject-fault",
                f"{kind}@{args.fault_step}:{args.fault_rank}"]
    expect_rc = 128 + signal.SIGABRT if kind == "crash" else 124
    return cmd, DDP_REPORT_RE, expect_rc, 90.0


def pipeline_script(args):
    """The p2p-hang script and its arguments, alike under both launchers."""
    return [PIPELINE_SCRIPT, "--trouble", f"stall@{args.fault_step}:{args.fault_rank}",
            "--torch-timeout", f"{args.torch_timeout:g}"]


def torchrun_case(args, kind, tmp):
    cmd = [PYTHON, SHIM, f"--nproc_per_node={args.nproc}", f"--log_dir={tmp}", f"--master_port={free_port()}"]
    if kind == "p2p-hang":
        cmd += pipeline_script(args)
    else:
        cmd += [TORCH_SCRIPT, "--fault", f"{kind}@{args.fault_step}:{args.fault_rank}",
                "--torch-timeout", f"{args.torch_timeout:g}"]
    return cmd, TORCH_REPORT_RE, 1, args.torch_timeout + 120.0


def named_rank(launcher, res):
    if launcher == "ddplaunch":
        m = DDP_REPORT_RE.search(res["report_line"] or "")
        return int(m.group(1) or m.group(2)) if m else None
    text = res["text"]
    i = text.find("Root Cause")
    m = TORCH_ROOT_RANK_RE.search(text, i) if i >= 0 else None
    return int(m.group(1)) if m else None


def measure(args, launcher, kind, env, log):
    times, rcs, culprit_ok = [], [], []
    for i in range(args.repeat):
        tmp = tempfile.mkdtemp(prefix="faultbench-")
        try:
            make = ddplaunch_case if launcher == "ddplaunch" else torchrun_case
            cmd, report_re, expect_rc, timeout = make(args, kind, tmp)
            res = run_once(cmd, env, report_re, timeout)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        tail = "\n".join(res["text"].splitlines()[-25:])
        if res["fault"] is None:
            raise BenchError(f"{launcher} {kind}: no fault line (rc {res['rc']})\n{tail}")
        if res["rc"] is None:
            raise BenchError(f"{launcher} {kind}: did not exit within {timeout:g} s\n{tail}")
        t_report = res["report"]
        if t_report is None:
            if launcher == "ddplaunch":
                raise BenchError(f"{launcher} {kind}: no failure report line\n{tail}")
            t_report = res["exit"]   # torchrun without a ChildFailedError line: its exit
        if res["rc"] != expect_rc:
            raise BenchError(f"{launcher} {kind}: exit code {res['rc']}, expected {expect_rc}\n{tail}")
        if res["leftovers"]:
            raise BenchError(f"{launcher} {kind}: processes left running after exit: {res['leftovers']}")
        dt = t_report - res["fault"]
        times.append(dt)
        rcs.append(res["rc"])
        culprit_ok.append(named_rank(launcher, res) == args.fault_rank)
        log(f"  {launcher:9s} {kind:5s} run {i + 1}/{args.repeat}: fault -> report {dt:7.3f} s, "
            f"exit {res['rc']}, launcher ran {res['elapsed']:.1f} s, "
            f"report names rank {named_rank(launcher, res)}")
    return {"launcher": launcher, "kind": kind, "median_s": statistics.median(times), "times_s": times,
            "exit_codes": sorted(set(rcs)), "names_culprit": all(culprit_ok)}


def parse_args(argv):
    ap = argparse.ArgumentParser(description="fault-to-report time, ddplaunch vs torchrun")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=3)
    ap.add_argument("--fault-step", type=int, default=50)
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--hang-timeout", type=float, default=3.0, help="ddplaunch --hang-timeout (s)")
    ap.add_argument("--torch-timeout", type=float, default=60.0,
                    help="init_process_group(timeout=) of the PyTorch peer (s)")
    ap.add_argument("--skip-torch", action="store_true")
    ap.add_argument("--json", action="store_true", help="also print the results as one JSON line")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.nproc < 2 or not 0 <= args.fault_rank < args.nproc:
        ap.error("need --repeat >= 1, --nproc >= 2 and 0 <= --fault-rank < --nproc")
    return args


def main(argv=None):
    args = parse_args(argv)
    for path in (DDPLAUNCH, DDPTRAIN):
        if not os.access(path, os.X_OK):
            print(f"fault_bench: {path} not found (build ddplaunch and ddptrain)", file=sys.stderr)
            return 1
    env = {k: v for k, v in os.environ.items()
           if k not in LAUNCHER_VARS and not k.startswith(("PET_", "TORCHELASTIC_", "DDPLAUNCH_"))}
    env.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1", PYTHON_EXEC=PYTHON)

    def log(msg):
        print(msg, flush=True)

    log(f"fault_bench: {args.nproc} ranks on the CPU (Gloo), rank {args.fault_rank} faulty at step "
        f"{args.fault_step}, median of {args.repeat}; ddplaunch --hang-timeout {args.hang_timeout:g} "
        f"(heartbeat interval 1 s); PyTorch peer: init_process_group(timeout={args.torch_timeout:g} s), "
        f"torchrun at its default --monitor_interval (5 s)")
    results, failed = [], []
    launchers = ["ddplaunch"] + ([] if args.skip_torch else ["torchrun"])
    for kind in ("crash", "hang", "python-hang", "p2p-hang"):
        for launcher in launchers:
            if kind == "python-hang" and launcher != "ddplaunch":
                continue  # torchrun's hang row already runs the PyTorch script
            try:
                results.append(measure(args, launcher, kind, env, log))
            except BenchError as e:
                failed.append(str(e))
                log(f"fault_bench: FAILED: {e}")

    if args.json:
        print(json.dumps({"results": results, "failed": failed, "torch_timeout_s": args.torch_timeout,
                          "hang_timeout_s": args.hang_timeout}))
    rows = [("fault", "launcher", "fault->report (median)", "runs (s)", "exit", "names culprit", "torch/ddplaunch")]
    by = {(r["launcher"], r["kind"]): r for r in results}
    for r in results:
        # torchrun's hang runs the PyTorch script: its peer is ddplaunch's python-hang row.
        ours = by.get(("ddplaunch", "python-hang" if r["kind"] == "hang" else r["kind"])) or \
            by.get(("ddplaunch", r["kind"]))
        ratio = "" if r["launcher"] == "ddplaunch" or not ours else f"{r['median_s'] / ours['median_s']:.1f}x"
        if r["kind"] == "crash":
            kind = "crash"
        elif r["kind"] == "p2p-hang":
            timeout = f"gloo {args.torch_timeout:g} s" if r["launcher"] == "torchrun" else f"{args.hang_timeout:g} s"
            kind = f"hang, PyTorch pipeline, send/recv only ({timeout})"
        elif r["launcher"] == "torchrun":
            kind = f"hang, PyTorch script (gloo {args.torch_timeout:g} s)"
        elif r["kind"] == "python-hang":
            kind = f"hang, PyTorch script ({args.hang_timeout:g} s)"
        else:
            kind = f"hang, ddptrain ({args.hang_timeout:g} s)"
        rows.append((kind, r["launcher"], f"{r['median_s']:.3f} s", " ".join(f"{t:.2f}" for t in r["times_s"]),
                     ",".join(map(str, r["exit_codes"])), "yes" if r["names_culprit"] else "no", ratio))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    print()
    for j, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if j == 0:
            print("  ".join("-" * w for w in widths))
    return 1 if failed else 0


def _on_signal(signum, _frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _on_signal)
    sys.exit(main())
