#!/usr/bin/env python3
"""Benchmark of `ddplaunch diagnose --json` on a big job's NCCL logs.

Generates LOGDIR/attempt_0/rank_<r>/nccl.log for --ranks ranks (default 1,024 on
8 GPUs per host) totalling --size bytes (default 1G) from the real NCCL lines in
tests/unit/fixtures/nccl (their formats, re-hosted and re-ranked: preamble, Init
START/COMPLETE, per-channel transports P2P/CUMEM inside a host and NET/IB [send]/
[receive] between hosts, channel counts, Init timings, then COLL lines, the bulk of
a real NCCL_DEBUG=INFO log), then times, in the same run and on warm page cache:
  peer:     cat of every file > /dev/null
  diagnose: ddplaunch diagnose --json LOGDIR > /dev/null (pinned to one core)
and prints MB/s of both. Target: diagnose >= 200 MB/s on one core.

  python3 tests/bench/diagnose_bench.py [--size 1G] [--ranks 1024] [--bin PATH] [--keep DIR]
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "unit" / "fixtures" / "nccl"
HEADER = re.compile(r"^(?:\[[^\]]*\] )?\S+:\d+:\d+ \[\d+\] ")


def parse_size(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMG]?)B?", s.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r}")
    return int(float(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def fixture_messages(path, pred=lambda m: True):
    """The messages (after the host:pid:tid [dev] header) of a fixture's NCCL lines."""
    out = []
    for line in (FIXTURES / path).read_text().splitlines():
        m = HEADER.match(line)
        if m and pred(line[m.end():]):
            out.append(line[m.end():])
    return out


class Templates:
    def __init__(self):
        ok = "job_ok/attempt_0/rank_0/nccl.log"
        self.preamble = [m for m in fixture_messages(ok) if m.startswith("NCCL INFO") and (
            "Bootstrap:" in m or "cudaDriverVersion" in m or "NCCL version" in m or "NET/" in m or "Using network" in m)]
        self.init_start = next(m for m in fixture_messages(ok) if m.endswith("Init START"))
        self.init_complete = next(m for m in fixture_messages(ok) if m.endswith("Init COMPLETE"))
        self.timings = next(m for m in fixture_messages(ok) if "Init timings" in m)
        self.counts = next(m for m in fixture_messages("nccl_2.21_ib_completion.log") if "coll channels" in m)
        self.p2p = next(m for m in fixture_messages(ok) if "via P2P/CUMEM" in m)
        self.net = next(m for m in fixture_messages("nccl_2.21_ib_completion.log") if "[receive] via NET/" in m)
        self.coll = fixture_messages("nccl_2.19_coll.log")
        self.warn = next(l for l in (FIXTURES / "nccl_2.13_conn_closed.log").read_text().splitlines()
                         if "Connection closed by remote peer" in l)
        assert self.preamble and self.coll

    @staticmethod
    def init_line(t, rank, nranks, dev, bus, comm_id, ptr):
        t = re.sub(r"comm 0x[0-9a-f]+", f"comm {ptr}", t)
        t = re.sub(r"rank \d+ nranks \d+", f"rank {rank} nranks {nranks}", t)
        t = re.sub(r"cudaDev \d+ nvmlDev \d+", f"cudaDev {dev} nvmlDev {dev}", t)
        t = re.sub(r"busId \S+", f"busId {bus}", t)
        return re.sub(r"commId 0x[0-9a-f]+", f"commId {comm_id}", t)

    @staticmethod
    def channel_line(t, ch, src, sdev, dst, ddev, direction=None, nic=0):
        t = re.sub(r"Channel \d+/", f"Channel {ch:02d}/", t)
        t = re.sub(r": \d+\[\d+\] -> \d+\[\d+\]", f": {src}[{sdev}] -> {dst}[{ddev}]", t)
        if direction:
            t = re.sub(r"\[(send|receive)\]", f"[{direction}]", t)
            t = re.sub(r"via NET/(\w+)/\d+", lambda m: f"via NET/{m.group(1)}/{nic}", t)
        return t


def generate(root, ranks, total, gpus_per_host=8, channels=16):
    t = Templates()
    per_rank = max(total // ranks, 4096)
    comm_id = "0x5ae77eb5ea4ec1ee"
    written = 0
    for r in range(ranks):
        host, dev = f"node{r // gpus_per_host:04d}", r % gpus_per_host
        pid = 10000 + r
        h = f"{host}:{pid}:{pid} [{dev}] "
        ht = f"{host}:{pid}:{pid + 60} [{dev}] "
        bus = f"{0x18 + 0x10 * dev:x}000"
        ptr = f"0x55{r:010x}"
        lines = [h + m.replace("10.7.147.73", f"10.{r // 2048}.{(r // 8) % 256}.{1 + r % 8}") for m in t.preamble]
        lines.append(ht + t.init_line(t.init_start, r, ranks, dev, bus, comm_id, ptr))
        nxt, prv = (r + 1) % ranks, (r - 1) % ranks
        for ch in range(channels):
            for peer in (nxt, prv):
                if peer // gpus_per_host == r // gpus_per_host:
                    lines.append(ht + t.channel_line(t.p2p, ch, r, dev, peer, peer % gpus_per_host))
                else:  # crossing hosts: this rank's [send] to peer and [receive] from it
                    lines.append(ht + t.channel_line(t.net, ch, r, dev, peer, peer % gpus_per_host, "send", dev))
                    lines.append(ht + t.channel_line(t.net, ch, peer, peer % gpus_per_host, r, dev, "receive", dev))
        lines.append(ht + t.counts)
        lines.append(ht + t.init_line(t.init_complete, r, ranks, dev, bus, comm_id, ptr))
        lines.append(ht + re.sub(r"rank \d+ nranks \d+", f"rank {r} nranks {ranks}", t.timings))
        head = "\n".join(lines) + "\n"
        coll = "".join(h + re.sub(r"nranks=\d+", f"nranks={ranks}", m) + "\n" for m in t.coll)
        body_len = max(per_rank - len(head), 0)
        body = coll * (body_len // len(coll) + 1)
        body = body[: body.rfind("\n", 0, body_len) + 1] if body_len else ""
        text = head + body
        if r % 97 == 5:
            text += t.warn + "\n"
        d = root / "attempt_0" / f"rank_{r}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "nccl.log").write_text(text)
        written += len(text)
    return written


def timed(cmd, **kw):
    t0 = time.perf_counter()
    res = subprocess.run(cmd, **kw)
    return time.perf_counter() - t0, res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=parse_size, default=parse_size("1G"), help="total log bytes (1G, 200M, ...)")
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--bin", default=os.environ.get("DDPLAUNCH_BIN") or str(REPO / "build" / "launcher" / "ddplaunch"))
    ap.add_argument("--keep", help="generate into this directory and keep it")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs of each; the best is reported")
    ap.add_argument("--min-mbps", type=float, default=0, help="exit 1 when diagnose is slower than this")
    args = ap.parse_args()

    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ddp-diagnose-bench-"))
    try:
        t0 = time.perf_counter()
        total = generate(root, args.ranks, args.size)
        print(f"generated {total / 1e6:.0f} MB for {args.ranks} ranks in {time.perf_counter() - t0:.1f} s under {root}")
        files = sorted(str(p) for p in root.rglob("nccl.log"))
        pin = ["taskset", "-c", "0"] if shutil.which("taskset") else []
        cat = lambda: timed(["xargs", "-0", "cat"], input="\0".join(files).encode(), stdout=subprocess.DEVNULL)
        diag = lambda: timed(pin + [args.bin, "diagnose", "--json", str(root)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        cat()  # warm the page cache
        best_cat, best_diag, out = float("inf"), float("inf"), None
        for _ in range(args.repeat):
            dt, _ = cat()
            best_cat = min(best_cat, dt)
            dt, res = diag()
            if res.returncode != 0:
                sys.exit(f"diagnose failed ({res.returncode}): {res.stderr.decode()[-2000:]}")
            best_diag, out = min(best_diag, dt), res.stdout
        doc = json.loads(out)
        [comm] = doc["communicators"]
        assert comm["nranks"] == args.ranks and len(comm["ranks_complete"]) == args.ranks, comm["nranks"]
        mb = total / 1e6
        print(f"ranks complete: {len(comm['ranks_complete'])}/{comm['nranks']}, transports: {len(doc['transports'])}, "
              f"warnings: {sum(w['count'] for w in doc['warnings'])}")
        print(f"{'peer: cat > /dev/null':<38} {best_cat:8.3f} s  {mb / best_cat:9.0f} MB/s")
        print(f"{'ddplaunch diagnose --json (1 core)':<38} {best_diag:8.3f} s  {mb / best_diag:9.0f} MB/s"
              f"  ({best_cat / best_diag:.0%} of cat; target >= 200 MB/s)")
        if args.min_mbps and mb / best_diag < args.min_mbps:
            sys.exit(1)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
