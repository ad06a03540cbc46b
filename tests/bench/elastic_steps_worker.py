#!/usr/bin/python3
"""An unmodified PyTorch DDP script (Gloo) for node_loss_bench.py: rank 0 appends
one line per completed step to OUT: "<unix time> <world size> <step>". It keeps no
checkpoint: after a re-form it trains again from step 0, which is all the benchmark
needs (the time of the new world's first step).

Usage (under a launcher): elastic_steps_worker.py OUT STEPS
"""
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

out, steps = sys.argv[1], int(sys.argv[2])
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(256, 256))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 256)
for step in range(steps):
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    if rank == 0:
        with open(out, "a") as f:
            f.write(f"{time.time():.6f} {world} {step}\n")
    time.sleep(0.02)
dist.destroy_process_group()
