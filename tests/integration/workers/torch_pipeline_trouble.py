#!/usr/bin/python3
"""A plain pipeline-parallel PyTorch script (Gloo on the CPU; it knows nothing of
ddplaunch): each rank is one stage of a small MLP. Forward activations go down the
stages with blocking send/recv, gradients come back up with isend/irecv and wait(),
and every stage steps its own optimizer; no collective after init_process_group.

--trouble KIND@STEP:RANK injects one trouble at STEP on RANK, which prints
"torch_pipeline_trouble: KIND at step STEP" to stderr as it does:
  stall        the stage sleeps before its step (as a stuck data loader would): the
               stages after it wait in recv for it, and the stages before it for their
               gradients
  recv-first   the stage receives its gradient before it sends its activation down:
               it and the next stage each wait to receive from the other

--any-source: the stages receive their activations with dist.recv without src (from
whichever rank sends), as some pipelines do.

--inference: forward only, under torch.no_grad(): no gradients, no optimizer, so the
script has no steps, and its send/recv are all it does between ranks.

--torch-timeout S: init_process_group(timeout=S): how long Gloo lets a send or receive
wait before it raises (torch's default: 30 min).

Usage: torch_pipeline_trouble.py [--steps N] [--step-sleep S] [--trouble KIND@STEP:RANK] [--any-source]
                                 [--inference] [--torch-timeout S]
"""
import argparse
import datetime
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

WIDTH = 32


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--step-sleep", type=float, default=0.02)
    ap.add_argument("--trouble", default=None)
    ap.add_argument("--any-source", action="store_true")
    ap.add_argument("--inference", action="store_true")
    ap.add_argument("--torch-timeout", type=float, default=1800.0)
    args = ap.parse_args()
    kind, at, who = None, -1, -1
    if args.trouble:
        kind, rest = args.trouble.split("@")
        at, who = (int(x) for x in rest.split(":"))

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.torch_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    stage = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh())
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    first, last = rank == 0, rank == world - 1
    if args.inference:
        infer(stage, args, kind, at, who)
        return
    for step in range(args.steps):
        trouble = kind if rank == who and step == at else None
        if trouble:
            print(f"torch_pipeline_trouble: {trouble} at step {step}", file=sys.stderr, flush=True)
        if trouble == "stall":
            time.sleep(3600)
        if first:
            x = torch.randn(8, WIDTH)
        else:
            x = torch.empty(8, WIDTH)
            receive(x, rank, args.any_source)
            x.requires_grad_()
        y = stage(x)
        if last:
            y.pow(2).mean().backward()
        else:
            grad = torch.empty(8, WIDTH)
            if trouble == "recv-first":
                dist.irecv(grad, src=rank + 1).wait()
            dist.send(y.detach(), dst=rank + 1)
            if trouble != "recv-first":
                dist.irecv(grad, src=rank + 1).wait()
            y.backward(grad)
        if not first:
            dist.isend(x.grad, dst=rank - 1).wait()
        opt.step()
        opt.zero_grad()
        time.sleep(args.step_sleep)
    print(f"torch_pipeline_trouble: done {rank}", flush=True)


def receive(x, rank, any_source):
    if any_source:
        dist.recv(x)
    else:
        dist.recv(x, src=rank - 1)


@torch.no_grad()
def infer(stage, args, kind, at, who):
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"torch_pipeline_trouble: {world} stages started", flush=True)
    for step in range(args.steps):
        if rank == who and step == at:
            print(f"torch_pipeline_trouble: {kind} at step {step}", file=sys.stderr, flush=True)
            time.sleep(3600)
        if rank == 0:
            x = torch.randn(8, WIDTH)
        else:
            x = torch.empty(8, WIDTH)
            receive(x, rank, args.any_source)
        y = stage(x)
        if rank != world - 1:
            dist.send(y, dst=rank + 1)
        time.sleep(args.step_sleep)
    print(f"torch_pipeline_trouble: done {rank}", flush=True)


if __name__ == "__main__":
    main()
