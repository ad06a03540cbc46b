#!/usr/bin/env python3
"""A plain PyTorch DDP script (Gloo, CPU) with the one-line preemption check
ddplaunch documents: after each optimizer step, `ddplaunch.should_stop()`;
when it says so, rank 0 saves a checkpoint and every rank prints
"torch_ddp_preemptible: rank R stopped after N" and exits 0.

Usage: torch_ddp_preemptible.py OUTDIR [--steps N]
OUTDIR/ready appears after step 5; OUTDIR/checkpoint.pt holds {"steps": N, "model": state_dict}.
Started again with that checkpoint there, it resumes ("resumed at step N") and, once
--steps are done, rank 0 writes OUTDIR/final.pt with the model.
"""
import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import ddplaunch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--steps", type=int, default=100000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    start = 0
    checkpoint = os.path.join(args.outdir, "checkpoint.pt")
    if os.path.exists(checkpoint):
        saved = torch.load(checkpoint)
        model.module.load_state_dict(saved["model"])
        start = saved["steps"]
        print(f"torch_ddp_preemptible: rank {rank} resumed at step {start}", flush=True)
    for step in range(start, args.steps):
        torch.manual_seed(1000 + step)  # each step's batch depends on the step alone
        x = torch.randn(8, 16)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if step == 5 and rank == 0:
            with open(os.path.join(args.outdir, "ready"), "w") as f:
                f.write("step 5\n")
        if ddplaunch.should_stop():
            if rank == 0:
                torch.save({"steps": step + 1, "model": model.module.state_dict()},
                           os.path.join(args.outdir, "checkpoint.pt"))
            print(f"torch_ddp_preemptible: rank {rank} stopped after {step + 1}", flush=True)
            dist.barrier()
            return 0
        time.sleep(0.005)
    if rank == 0:
        torch.save(model.module.state_dict(), os.path.join(args.outdir, "final.pt"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
