#!/usr/bin/env python3
"""A one-rank PyTorch NCCL job for run_gpu_checks.sh: a few all_reduces on the GPU,
then it prints "ready" and waits, so that `ddplaunch stacks` can ask the Python
companion for its stacks and PyTorch's NCCL flight-recorder dump (torch >= 2.2)."""
import time

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
t = torch.ones(1 << 20, device="cuda")
for _ in range(5):
    dist.all_reduce(t)
torch.cuda.synchronize()
print("ready", flush=True)
time.sleep(120)
