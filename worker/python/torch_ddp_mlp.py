"""A plain PyTorch DistributedDataParallel training script, unmodified for
ddplaunch: it reads the torchrun environment through init_process_group's
env:// defaults, trains a small MLP on a synthetic classification task over
Gloo, and rank 0 prints the loss as it falls and the throughput at the end.

Run:  ddplaunch --nproc-per-node=4 worker/python/torch_ddp_mlp.py --steps 200
"""

import argparse
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def teacher_data(seed, samples, features, classes):
    """Labels from a fixed random teacher network: learnable, and identical on every rank."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, features, generator=g)
    teacher = torch.randn(features, classes, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--log-every", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)

    x, y = teacher_data(args.seed, 16384, 32, 10)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    global_batch = world * args.batch_size
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        # Rank r takes its contiguous slice of the global batch of this step.
        first = ((step - 1) * global_batch + rank * args.batch_size) % (len(x) - args.batch_size)
        xb, yb = x[first:first + args.batch_size], y[first:first + args.batch_size]
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        if rank == 0 and (step % args.log_every == 0 or step == 1):
            print(f"step {step:5d}  loss {loss.item():.4f}", flush=True)
    elapsed = time.perf_counter() - start
    if rank == 0:
        print(f"done: {args.steps} steps on {world} ranks, {args.steps * global_batch / elapsed:.0f} samples/s, "
              f"{1000 * elapsed / args.steps:.2f} ms/step", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
