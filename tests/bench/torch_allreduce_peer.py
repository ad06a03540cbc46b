#!/usr/bin/python3
"""The PyTorch peer of `ddpbench allreduce`: torch.distributed's Gloo
all-reduce, measured exactly the way ddpbench measures the runtime's.

Run it under ddplaunch (or any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT), with the same ranks as ddpbench:

  PYTHON_EXEC=/usr/bin/python3 ddplaunch --nproc-per-node=2 \
      tests/bench/torch_allreduce_peer.py --sizes 1M,4M,16M,64M --iters 10 --warmup 3 --json

Per size, as worker/ddpbench/allreduce_bench.cpp does:
  * a tensor of max(1, bytes / element size) elements of --dtype;
  * --warmup times: fill with 1, all_reduce(SUM), wait;
  * --iters times: fill with rank+1, barrier, time one all_reduce(SUM) (synchronous);
  * check every element equals 1 + 2 + ... + n (relative 1e-3);
  * the reported time is the slowest rank's mean (all_gather of the per-rank
    mean as float64, take the max).
Rank 0 prints one JSON line per size with the same fields as ddpbench, with
"impl":"torch" (or, without --json, a table). Exit 0 when every sum was right,
1 otherwise.
"""
import argparse
import json
import re
import sys
import time

import torch
import torch.distributed as dist

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

_SCALE = {"": 1, "K": 1 << 10, "k": 1 << 10, "KiB": 1 << 10,
          "M": 1 << 20, "MiB": 1 << 20, "G": 1 << 30, "GiB": 1 << 30}


def parse_size(text):
    """Bytes from '4K', '1M', '1.5G', '4096' (the same suffixes as ddpbench)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2) not in _SCALE:
        raise argparse.ArgumentTypeError(f"bad size {text!r} (use e.g. 4096, 4K, 1M, 1G)")
    return int(float(m.group(1)) * _SCALE[m.group(2)])


def parse_sizes(text):
    return [parse_size(s) for s in text.split(",") if s.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="gloo", choices=["gloo"])
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("1M,4M,16M,64M"),
                    help="message sizes in bytes, comma-separated (K, M, G suffixes)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--dtype", default="float32", choices=sorted(DTYPES))
    ap.add_argument("--json", action="store_true", help="one JSON line per size")
    o = ap.parse_args(argv)
    if o.warmup < 0 or o.iters < 1:
        ap.error("--warmup must be >= 0 and --iters >= 1")

    dist.init_process_group(o.backend)  # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    rank, n = dist.get_rank(), dist.get_world_size()
    root = rank == 0
    dtype = DTYPES[o.dtype]
    element = torch.empty((), dtype=dtype).element_size()

    if root and not o.json:
        print(f"# torch allreduce: {n} ranks, backend {dist.get_backend()}, dtype {o.dtype} "
              f"(torch {torch.__version__})")
        print(f"{'size(B)':>12} {'count':>12} {'time(us)':>10} {'algbw(GB/s)':>10} {'busbw(GB/s)':>10}")

    all_right = True
    for size in o.sizes:
        count = max(1, size // element)
        t = torch.empty(count, dtype=dtype)
        for _ in range(o.warmup):
            t.fill_(1)
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        total_s = 0.0
        for _ in range(o.iters):
            t.fill_(rank + 1)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            total_s += time.perf_counter() - start
        # Every element must hold 1 + 2 + ... + n.
        expected = n * (n + 1) / 2.0
        right = bool((t.to(torch.float64) - expected).abs().max().item() < 1e-3 * expected)
        all_right = all_right and right
        # The slowest rank's time: the collective ends when the last rank does.
        slowest = torch.full((1,), total_s / o.iters, dtype=torch.float64)
        gathered = [torch.empty(1, dtype=torch.float64) for _ in range(n)]
        dist.all_gather(gathered, slowest)
        seconds = max(g.item() for g in gathered)
        nbytes = count * element
        algbw = nbytes / seconds / 1e9
        busbw = algbw * 2.0 * (n - 1) / n
        if not root:
            continue
        if o.json:
            print(json.dumps({"bench": "allreduce", "impl": "torch", "backend": dist.get_backend(),
                              "ranks": n, "dtype": o.dtype, "bytes": nbytes, "seconds": seconds,
                              "algbw_gbps": algbw, "busbw_gbps": busbw, "correct": right},
                             separators=(",", ":")))
        else:
            print(f"{nbytes:12d} {count:12d} {seconds * 1e6:10.1f} {algbw:10.3f} {busbw:10.3f}"
                  f"{'' if right else '  WRONG RESULT'}")
        sys.stdout.flush()

    dist.barrier()
    dist.destroy_process_group()
    return 0 if all_right else 1


if __name__ == "__main__":
    sys.exit(main())
