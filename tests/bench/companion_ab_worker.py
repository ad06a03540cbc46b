#!/usr/bin/python3
"""A plain PyTorch DDP script (Gloo on the CPU: an MLP, a DataLoader, an optimizer
step and a loss all_reduce per step) that measures what the Python companion's
wrappers cost it, for companion_bench.py. Run under ddplaunch with the companion.

Steps go in blocks of --block; every other block runs with the companion's wrappers
swapped back for the originals (the functions torch had before the companion wrapped
them), so both halves share the same process, machine load and heartbeat thread, and
slow drifts of the machine cancel out. All ranks swap at the same step.

Rank 0 prints, at the end:
  ab: on_ms=M off_ms=M all_ms=M on_cpu_us=C off_cpu_us=C pair_us=D pairs=P wrapped=N steps=S
      companion_cpu_ms=X wall_s=W
(medians of the step's wall time and of the main thread's CPU time, per half and over
all steps; the median over the P pairs of adjacent blocks of the wrapped block's median
step minus the unwrapped one's, which cancels what drifts slower than two blocks; the
CPU time of the companion's own threads). Without the companion
(--no-python-companion) nothing is wrapped and both halves are the same script.
"""
import argparse
import datetime
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

MARK = "__ddplaunch_wrapped__"


class Batches(Dataset):
    def __init__(self, steps, width):
        self.steps, self.width = steps, width

    def __len__(self):
        return self.steps

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index)
        return torch.randn(16, self.width, generator=g), torch.randint(0, 10, (16,), generator=g)


def wrapped_attributes(opt):
    """(owner, name, wrapper) for each function the companion wrapped."""
    import torch.distributed.distributed_c10d as c10d
    import torch.utils.data.dataloader as dataloader
    candidates = [(torch.Tensor, "backward"), (torch.autograd, "backward"),
                  (nn.parallel.DistributedDataParallel, "forward"), (type(opt), "step"),
                  (dataloader._BaseDataLoaderIter, "__next__")]
    candidates += [(m, name) for m in (dist, c10d) for name in ("all_reduce", "barrier")]
    found = []
    for owner, name in candidates:
        fn = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if fn is not None and getattr(fn, MARK, False):
            found.append((owner, name, fn))
    return found


def use(found, wrapped):
    for owner, name, wrapper in found:
        setattr(owner, name, wrapper if wrapped else wrapper.__wrapped__)


def companion_cpu_ms():
    """CPU time of the threads the companion started, from the kernel's
    per-thread schedstat (nanoseconds; clock-tick counts are too coarse)."""
    import threading
    total = 0
    for t in threading.enumerate():
        if not t.name.startswith("ddplaunch-companion") or t.native_id is None:
            continue
        try:
            with open(f"/proc/self/task/{t.native_id}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--block", type=int, default=50)
    ap.add_argument("--warm", type=int, default=5, help="steps of each block left out: they warm up again")
    ap.add_argument("--width", type=int, default=32, help="input and hidden width of the MLP (x2 hidden)")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.manual_seed(0)
    w = args.width
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(w, 2 * w), nn.ReLU(), nn.Linear(2 * w, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Batches(args.steps, w), batch_size=None)
    opt.zero_grad()
    model(torch.zeros(1, w)).sum().backward()
    opt.step()   # the companion wraps the optimizer's class at its first construction
    found = wrapped_attributes(opt)

    times = {True: [], False: []}
    cpu = {True: [], False: []}
    block_means = []   # (wrapped, median step of the block's measured steps)
    block = []
    started = time.monotonic()
    tt, pc = time.thread_time, time.perf_counter
    wrapped = True
    for step, (x, y) in enumerate(loader):
        if step % args.block == 0:
            if block:
                block_means.append((wrapped, statistics.median(block)))
                block = []
            wrapped = (step // args.block) % 2 == 0
            use(found, wrapped)
        t0, c0 = pc(), tt()
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        metric = loss.detach().reshape(1)
        dist.all_reduce(metric)
        if step % args.block >= args.warm:
            times[wrapped].append(pc() - t0)
            cpu[wrapped].append(tt() - c0)
            block.append(times[wrapped][-1])
    if block:
        block_means.append((wrapped, statistics.median(block)))
    use(found, True)
    # Wrapped blocks are the even ones: pair each with the unwrapped block after it.
    pairs = [on - off for (w_on, on), (w_off, off) in zip(block_means[0::2], block_means[1::2]) if w_on and not w_off]
    dist.barrier()
    if dist.get_rank() == 0:
        med = statistics.median
        print(f"ab: on_ms={med(times[True]) * 1e3:.4f} off_ms={med(times[False]) * 1e3:.4f} "
              f"all_ms={med(times[True] + times[False]) * 1e3:.4f} "
              f"on_cpu_us={med(cpu[True]) * 1e6:.2f} off_cpu_us={med(cpu[False]) * 1e6:.2f} "
              f"pair_us={med(pairs) * 1e6 if pairs else 0.0:.2f} pairs={len(pairs)} "
              f"wrapped={len(found)} steps={args.steps} companion_cpu_ms={companion_cpu_ms():.3f} "
              f"wall_s={time.monotonic() - started:.3f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
