#!/usr/bin/python3
"""A PyTorch DDP (Gloo, CPU) training loop with an injectable fault: the torchrun peer of
`ddptrain --inject-fault` in tests/bench/fault_bench.py.

Run it under a launcher (torchrun environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
Every step trains a small MLP on random data with DistributedDataParallel, so each step
all-reduces the gradients.

  --fault KIND@STEP:RANK   KIND crash (os.abort(), like ddptrain's crash) or hang (stop
                           making progress: sleep forever before the step's collectives;
                           the other ranks then wait in the all-reduce until Gloo's own
                           timeout, --torch-timeout, fails them)
  --torch-timeout S        init_process_group(timeout=S seconds), default 60
  --steps N                default 1000000 (the fault ends the run long before)

Just before the fault the faulty rank prints, to stderr and flushed:
  torch_ddp_fault: injected fault at step N (rank R, unix time T)
with T = time.time(), so a reader can parse both the event and the worker's clock.
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def parse_fault(text):
    kind, _, rest = text.partition("@")
    step, _, rank = rest.partition(":")
    if kind not in ("crash", "hang") or not step.isdigit() or not (rank.isdigit() or rank == "*"):
        raise SystemExit(f"torch_ddp_fault: bad --fault {text!r} (KIND@STEP:RANK, KIND crash|hang)")
    return kind, int(step), rank


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fault", default=None)
    ap.add_argument("--torch-timeout", type=float, default=60.0)
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args()
    fault = parse_fault(args.fault) if args.fault else None

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.torch_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1 + rank)
    if rank == 0:
        print(f"torch_ddp_fault: {world} rank(s), gloo timeout {args.torch_timeout:g} s", flush=True)

    for step in range(args.steps):
        if fault and step == fault[1] and fault[2] in ("*", str(rank)):
            print(f"torch_ddp_fault: injected fault at step {step} (rank {rank}, unix time {time.time():.6f})",
                  file=sys.stderr, flush=True)
            if fault[0] == "crash":
                os.abort()
            while True:  # hang: alive, never enters the next all-reduce
                time.sleep(3600)
        x = torch.randn(args.batch, 32, generator=gen)
        y = torch.randint(0, 10, (args.batch,), generator=gen)
        opt.zero_grad()
        loss_fn(ddp(x), y).backward()
        opt.step()
    dist.destroy_process_group()
    if rank == 0:
        print(f"torch_ddp_fault: done: {args.steps} steps", flush=True)


if __name__ == "__main__":
    main()
