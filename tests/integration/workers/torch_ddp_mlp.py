#!/usr/bin/python3
"""PyTorch reference for ddptrain's MLP training, shared by
tests/integration/test_ddptrain.py and tests/bench/train_bench.py.

It reproduces `ddptrain --model mlp` exactly, with torch's own
DistributedDataParallel over Gloo:

  * model: nn.Linear layers named fc0, fc1, ... with ReLU between them and none
    after the last (--mlp-sizes input,hidden...,classes);
  * loss: mean cross-entropy on int64 labels;
  * data: a torch.save'd dict {"x": float [N, in], "y": int64 [N]} (--data-file);
  * sharding: global batch G = W * B; step s uses global positions s*G .. s*G+G-1
    modulo N, and rank r takes the contiguous slice starting at s*G + r*B;
  * optimizer: SGD (--lr, --momentum, --weight-decay), constant learning rate;
  * --init F.pt loads a state_dict, --save-final F.pt writes one (rank 0);
  * --dtype float64 trains in double precision (ddptrain --precision fp64).

Run it under ddplaunch (torchrun environment: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT; init_process_group("gloo")); without RANK in the environment it
trains as one process without a process group.

Modes besides training, which need no process group:
  --write-data F --samples N   a deterministic data set for --mlp-sizes (seed --seed)
  --write-init F               a state_dict of a freshly seeded module (seed --seed)

--bench times every step (data gather, zero_grad, forward, backward, optimizer
step) after --warmup untimed steps, and prints one JSON line per rank:
  {"bench": "train", "impl": "torch", "rank": r, "ranks": W, "median_step_s": ...}
After each step (outside the timed region) the ranks average the loss, as
ddptrain does when it reports a step (--log-every 1), so both sides do the same
per-step work.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self, sizes):
        super().__init__()
        self.count = len(sizes) - 1
        for i in range(self.count):
            setattr(self, f"fc{i}", nn.Linear(sizes[i], sizes[i + 1]))

    def forward(self, x):
        for i in range(self.count):
            x = getattr(self, f"fc{i}")(x)
            if i + 1 < self.count:
                x = F.relu(x)
        return x


def parse_sizes(text):
    try:
        sizes = [int(s) for s in text.split(",")]
    except ValueError:
        sizes = []
    if len(sizes) < 2 or any(s <= 0 for s in sizes):
        raise argparse.ArgumentTypeError(f"bad --mlp-sizes {text!r} (expected e.g. 32,64,10)")
    return sizes


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mlp-sizes", type=parse_sizes, default=parse_sizes("32,64,64,10"))
    p.add_argument("--data-file", help="torch.save'd dict {'x': float [N, in], 'y': int64 [N]}")
    p.add_argument("--batch-size", type=int, default=32, help="samples per rank and step")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.0)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--init", help="initial parameters: a torch.save'd state_dict")
    p.add_argument("--save-final", help="write the final parameters (rank 0)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP's bucket_cap_mb")
    p.add_argument("--grad-as-bucket-view", action="store_true", help="DDP's gradient_as_bucket_view")
    p.add_argument("--bench", action="store_true", help="time the steps, print JSON lines")
    p.add_argument("--warmup", type=int, default=3, help="--bench: untimed steps first")
    p.add_argument("--write-data", metavar="F", help="write a data set and exit")
    p.add_argument("--samples", type=int, default=1024, help="--write-data: samples")
    p.add_argument("--write-init", metavar="F", help="write a seeded state_dict and exit")
    args = p.parse_args(argv)
    if args.batch_size < 1 or args.steps < 1 or args.warmup < 0 or args.samples < 1:
        p.error("--batch-size, --steps and --samples must be positive, --warmup >= 0")
    if not (args.write_data or args.write_init or args.data_file):
        p.error("training needs --data-file")
    if args.bench and args.steps <= args.warmup:
        p.error("--bench needs --steps > --warmup")
    return args


def write_data(args):
    """x ~ N(0, 1); y from a fixed random linear teacher, so the loss can fall."""
    g = torch.Generator().manual_seed(args.seed)
    inputs, classes = args.mlp_sizes[0], args.mlp_sizes[-1]
    x = torch.randn(args.samples, inputs, generator=g, dtype=torch.float32)
    teacher = torch.randn(inputs, classes, generator=g, dtype=torch.float32)
    y = (x @ teacher).argmax(dim=1).to(torch.int64)
    torch.save({"x": x.contiguous(), "y": y.contiguous()}, args.write_data)


def write_init(args):
    torch.manual_seed(args.seed)
    model = Mlp(args.mlp_sizes)
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, args.write_init)


def shard(step, rank, world, batch, samples):
    start = step * world * batch + rank * batch
    return torch.arange(start, start + batch, dtype=torch.int64).remainder(samples)


def train(args):
    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    else:
        rank, world = 0, 1
    dtype = torch.float64 if args.dtype == "float64" else torch.float32

    torch.manual_seed(args.seed)
    model = Mlp(args.mlp_sizes)
    if args.init:
        model.load_state_dict(torch.load(args.init), strict=True)
    model = model.to(dtype)
    data = torch.load(args.data_file)
    x, y = data["x"].to(dtype).contiguous(), data["y"].to(torch.int64).contiguous()
    if x.dim() != 2 or x.size(1) != args.mlp_sizes[0] or y.shape != (x.size(0),):
        raise SystemExit(f"torch_ddp_mlp: {args.data_file}: x {tuple(x.shape)}, y {tuple(y.shape)} "
                         f"do not fit --mlp-sizes {args.mlp_sizes}")
    samples = x.size(0)

    net = (nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb,
                                               gradient_as_bucket_view=args.grad_as_bucket_view)
           if distributed else model)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    times, first_loss, loss_value = [], None, None
    for s in range(args.steps):
        t0 = time.perf_counter()
        idx = shard(s, rank, world, args.batch_size, samples)
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        optimizer.zero_grad(set_to_none=True)  # PyTorch 2's default; ddptrain does the same
        loss = F.cross_entropy(net(xb), yb)
        loss.backward()
        optimizer.step()
        loss_value = loss.item()
        t1 = time.perf_counter()
        if s >= args.warmup:
            times.append(t1 - t0)
        if args.bench and distributed:  # what ddptrain's per-step report does
            mean = torch.tensor([loss_value], dtype=torch.float64)
            dist.all_reduce(mean)
            loss_value = mean.item() / world
        if first_loss is None:
            first_loss = loss_value

    if rank == 0 and args.save_final:
        torch.save({k: v.detach().cpu().clone() for k, v in model.state_dict().items()},
                   args.save_final)
    if args.bench:
        print(json.dumps({"bench": "train", "impl": "torch", "rank": rank, "ranks": world,
                          "batch_size": args.batch_size, "timed_steps": len(times),
                          "params": sum(p.numel() for p in model.parameters()),
                          "threads": torch.get_num_threads(),
                          "median_step_s": statistics.median(times),
                          "mean_step_s": statistics.fmean(times)}), flush=True)
    elif rank == 0:
        print(f"torch_ddp_mlp: done: {args.steps} steps on {world} rank(s), "
              f"loss {first_loss:.4f} -> {loss_value:.4f}", flush=True)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


def main(argv=None):
    args = parse_args(argv)
    if args.write_data:
        write_data(args)
    if args.write_init:
        write_init(args)
    if args.write_data or args.write_init:
        return 0
    train(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
