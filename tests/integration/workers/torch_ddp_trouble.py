#!/usr/bin/python3
"""A plain PyTorch DDP (Gloo, CPU) script with one injectable trouble, for the Python
companion's tests: nothing in it knows about ddplaunch.

Each step reads a batch through a DataLoader, trains a small MLP under
DistributedDataParallel (so backward all-reduces the gradients), steps an SGD optimizer
and all-reduces the loss for logging.

  --trouble KIND@STEP:RANK   what goes wrong, on which rank, at which step:
      data-hang     the rank blocks in its data loading (time.sleep in Dataset.__getitem__)
      slow-data     from STEP on, the rank's data loading takes --slow-seconds more per batch
                    (time.sleep in Dataset.__getitem__), as on a slow disk: the others
                    wait for it in DDP's backward every step, a straggler, not a hang
      slow-backward from STEP on, the rank's backward takes --slow-seconds more per step
                    (time.sleep in the backward of an identity autograd Function on the
                    model's output), as on a slower or throttled device: the others
                    wait for it at the end of DDP's backward every step, a straggler
      skip          the rank skips the loss all_reduce at STEP, then every rank enters a
                    barrier at the end: the others wait in the all_reduce it skipped
      skip-send     with --p2p: the rank skips its send at STEP (on an even step), so the
                    next rank waits in its recv while the others go on into the loss
                    all_reduce
      skip-coalesced  with --coalesced: the rank skips the coalesced block and the loss
                    all_reduce at STEP, then every rank enters a barrier at the end: the
                    others wait in the block it skipped
      size          the rank all-reduces a tensor of a different size at STEP
      subgroup-skip ranks 0 and 1 also all-reduce the loss in their own group
                    (dist.new_group([0, 1])) every step; the rank (0 or 1) skips that
                    at STEP and goes on into the loss all_reduce on every rank, where
                    its partner, waiting in the group's, never arrives
      subgroup-size as subgroup-skip, but at STEP the rank all-reduces a tensor of a
                    different size in that group
      subgroup-dtype  as subgroup-size, but the tensor has the same size (4 bytes)
                    and another dtype (int32): Gloo completes that with a wrong sum,
                    and the run goes on
      raise         the rank raises ValueError at STEP (no @record anywhere)
      segfault      the rank dereferences NULL in native code at STEP (SIGSEGV), as a
                    broken extension would
      gil-hang      the rank blocks in C at STEP with the GIL held (libc sleep through
                    ctypes.PyDLL), as an extension that forgot to release it would:
                    no Python thread of the rank runs, the companion's neither
      program-hang  the rank waits at STEP for a program it started that never
                    returns (subprocess.run of sleep 3600), as a stuck upload would
      loader-crash  the rank's DataLoader worker raises at STEP
      loader-segfault  the rank's DataLoader worker dereferences NULL at STEP (SIGSEGV)
      long-eval     at STEP every rank evaluates the model (DDP forwards over a DataLoader,
                    under no_grad: no step, no collective) for --eval-seconds, the rank
                    for twice as long while the others wait in the all_reduce of the
                    result; then the run ends: slow work, not a hang
      slow-save     at STEP the rank saves the model and 192 tensors of 64 KB with torch.save
                    into a pipe (a FIFO) that a helper process drains in 64 KB reads spread
                    over --save-seconds, as a big checkpoint written to slow storage: torch
                    writes each tensor with the GIL held, one write() each; the others
                    wait in a barrier, then the run ends: slow work, not a hang
      stalled-save  as slow-save, but the helper stops reading after 1 MB: the write
                    blocks for good, as on a storage server that stopped answering
  --ddp-groups      DDP runs on data-parallel groups instead of the default one: ranks 0
                    and 1 share one (dist.new_group([0, 1]), passed as process_group=),
                    every other rank has its own; the loss all_reduce stays on all ranks
  --p2p             every step also passes the loss down the ranks as a pipeline would
                    (rank r receives it from r - 1 and sends it to r + 1: blocking send
                    and recv on even steps, batch_isend_irecv on odd ones), and every
                    10 steps all ranks enter a monitored_barrier
  --p2p-group       the same on a group of all ranks (dist.new_group), which also
                    all-reduces the loss every step after them
  --p2p-counted     torch 2.2's Gloo counts those calls in the group's collective counter:
                    make torch 1.13's do so too (torch_p2p_counting.py)
  --coalesced       every step also all-reduces the loss and a 7-element tensor made from
                    it in one coalesced block (torch.distributed's _coalescing_manager, as
                    Megatron's bucketed reductions do), before the loss all_reduce
  --coalesced-deferred  torch 2.1 and later issue such a block's all-reduces as one call
                    as it ends, counted once: make torch 1.13 do so too
                    (torch_coalesced_counting.py)
  --steps N         default 1000000 (the trouble ends the run long before)
  --step-sleep S    pause per step (default 0.02)
  --workers N       DataLoader workers (default 0; loader-crash and loader-segfault use 1)
  --worker-start M  how the DataLoader starts its workers: fork (default), spawn, forkserver
  --eval-seconds S  long-eval's evaluation pass (default 8)
  --save-seconds S  how long slow-save's write takes (default 8)
  --slow-seconds S  slow-data's extra time per batch, slow-backward's per backward (default 0.2)

Just before the trouble the rank prints to stderr, flushed:
  torch_ddp_trouble: KIND at step N (rank R)
"""
import argparse
import ctypes
import datetime
import itertools
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

TROUBLES = ("data-hang", "slow-data", "slow-backward", "skip", "size", "raise", "segfault", "gil-hang", "loader-crash",
            "loader-segfault", "subgroup-skip", "subgroup-size", "subgroup-dtype", "long-eval", "slow-save",
            "stalled-save", "program-hang", "skip-send", "skip-coalesced")
SUBGROUP_TROUBLES = ("subgroup-skip", "subgroup-size", "subgroup-dtype")


def parse_trouble(text):
    kind, _, rest = text.partition("@")
    step, _, rank = rest.partition(":")
    if kind not in TROUBLES or not step.isdigit() or not rank.isdigit():
        raise SystemExit(f"torch_ddp_trouble: bad --trouble {text!r} (KIND@STEP:RANK)")
    return kind, int(step), int(rank)


def decode_natively():
    ctypes.string_at(0)   # reads address 0: SIGSEGV


def hold_the_gil():
    while True:
        ctypes.PyDLL(None).sleep(3600)   # PyDLL keeps the GIL during the call


class SlowBackward(torch.autograd.Function):
    """The identity, whose backward sleeps the seconds it was given."""

    @staticmethod
    def forward(ctx, x, seconds):
        ctx.seconds = seconds
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if ctx.seconds > 0:
            time.sleep(ctx.seconds)
        return grad, None


def announce(kind, step, rank):
    print(f"torch_ddp_trouble: {kind} at step {step} (rank {rank})", file=sys.stderr, flush=True)


class Batches(Dataset):
    """Random batches; item `stall_at` blocks (data-hang), items from `slow_from` on
    take `slow_seconds` more (slow-data), `crash_at` raises (loader-crash),
    `segfault_at` ends the worker by SIGSEGV (loader-segfault)."""

    def __init__(self, rank, steps, stall_at=-1, crash_at=-1, segfault_at=-1, slow_from=-1, slow_seconds=0.0):
        self.rank, self.steps = rank, steps
        self.stall_at, self.crash_at, self.segfault_at = stall_at, crash_at, segfault_at
        self.slow_from, self.slow_seconds = slow_from, slow_seconds

    def __len__(self):
        return self.steps

    def __getitem__(self, index):
        if index == self.stall_at:
            announce("data-hang", index, self.rank)
            time.sleep(3600)
        if 0 <= self.slow_from <= index:
            if index == self.slow_from:
                announce("slow-data", index, self.rank)
            time.sleep(self.slow_seconds)
        if index == self.crash_at:
            announce("loader-crash", index, self.rank)
            raise RuntimeError(f"corrupt sample {index}")
        if index == self.segfault_at:
            announce("loader-segfault", index, self.rank)
            decode_natively()
        g = torch.Generator().manual_seed(index * 97 + self.rank)
        return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)


def evaluate(model, seconds):
    """Forwards under no_grad for `seconds`, then the all_reduce of the summed outputs."""
    total = torch.zeros(1)
    end = time.monotonic() + seconds
    with torch.no_grad():
        while time.monotonic() < end:
            for x in DataLoader(torch.randn(64, 32), batch_size=16):
                total += model(x).sum()
    dist.all_reduce(total)


SAVE_BYTES = 12 << 20
DRAIN = """
import os, sys, time
fifo, total, seconds, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
chunk = 64 << 10
pause = seconds / (total / chunk)
got = 0
with open(fifo, "rb", buffering=0) as f:
    while True:
        if limit and got >= limit:
            time.sleep(3600)
        data = f.read(chunk)
        if not data:
            break
        got += len(data)
        time.sleep(pause)
"""


def save_slowly(model, seconds, stall):
    """torch.save into a FIFO a helper drains slowly (or stops draining)."""
    import subprocess
    import tempfile
    folder = tempfile.mkdtemp(prefix="ddpt-save-")
    fifo = os.path.join(folder, "checkpoint.pt")
    os.mkfifo(fifo)
    limit = (1 << 20) if stall else 0
    drain = subprocess.Popen([sys.executable, "-c", DRAIN, fifo, str(SAVE_BYTES), str(seconds), str(limit)])
    try:
        chunks = [torch.zeros(16 << 10) for _ in range(SAVE_BYTES // (64 << 10))]
        torch.save({"model": model.state_dict(), "extra": chunks}, fifo)
    finally:
        drain.wait()
        os.unlink(fifo)
        os.rmdir(folder)


def pass_down(tensor, step, rank, world, skip_send, group=None):
    """The pipeline's point-to-point calls of one step (see --p2p), on `group`
    (of all ranks) or the default group."""
    previous, following = rank - 1, rank + 1
    if step % 2 == 0:
        if previous >= 0:
            dist.recv(tensor, previous, group=group)
        if skip_send:
            announce("skip-send", step, rank)
        elif following < world:
            dist.send(tensor, following, group=group)
    else:
        ops = ([dist.P2POp(dist.irecv, tensor, previous, group)] if previous >= 0 else []) + \
              ([dist.P2POp(dist.isend, tensor, following, group)] if following < world else [])
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    if step % 10 == 9:
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=60))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trouble", default=None)
    ap.add_argument("--steps", type=int, default=1000000)
    ap.add_argument("--step-sleep", type=float, default=0.02)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--worker-start", choices=("fork", "spawn", "forkserver"), default="fork")
    ap.add_argument("--ddp-groups", action="store_true")
    ap.add_argument("--p2p", action="store_true")
    ap.add_argument("--p2p-group", action="store_true")
    ap.add_argument("--p2p-counted", action="store_true")
    ap.add_argument("--coalesced", action="store_true")
    ap.add_argument("--coalesced-deferred", action="store_true")
    ap.add_argument("--eval-seconds", type=float, default=8.0)
    ap.add_argument("--save-seconds", type=float, default=8.0)
    ap.add_argument("--slow-seconds", type=float, default=0.2)
    args = ap.parse_args()
    kind, at, who = parse_trouble(args.trouble) if args.trouble else (None, -1, -1)

    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    data = Batches(rank, args.steps,
                   stall_at=at if rank == who and kind == "data-hang" else -1,
                   crash_at=at if rank == who and kind == "loader-crash" else -1,
                   segfault_at=at if rank == who and kind == "loader-segfault" else -1,
                   slow_from=at if rank == who and kind == "slow-data" else -1, slow_seconds=args.slow_seconds)
    workers = max(args.workers, 1) if kind in ("loader-crash", "loader-segfault") else args.workers
    loader = DataLoader(data, batch_size=None, num_workers=workers,
                        multiprocessing_context=args.worker_start if workers else None)
    batches = enumerate(loader)
    # The workers start before the process group: a spawned one imports torch anew,
    # which takes seconds, and the tests' hang timeout is 3 s.
    first = next(batches)
    if args.p2p_counted:
        import torch_p2p_counting
        torch_p2p_counting.install()
    if args.coalesced_deferred:
        import torch_coalesced_counting
        torch_coalesced_counting.install()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    mine = rank == who
    pair = dist.new_group([0, 1]) if kind in SUBGROUP_TROUBLES else None
    pipeline = dist.new_group(list(range(dist.get_world_size()))) if args.p2p_group else None
    ddp_group = None
    if args.ddp_groups:   # every rank makes every group, in the same order
        groups = [dist.new_group([0, 1])] + [dist.new_group([r]) for r in range(2, dist.get_world_size())]
        ddp_group = groups[max(0, rank - 1)]
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)), process_group=ddp_group)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    if rank == 0:
        print(f"torch_ddp_trouble: {dist.get_world_size()} rank(s) started", flush=True)

    for step, (x, y) in itertools.chain([first], batches):
        if mine and kind == "raise" and step == at:
            announce(kind, step, rank)
            raise ValueError(f"bad value at step {step}")
        if mine and kind == "segfault" and step == at:
            announce(kind, step, rank)
            decode_natively()
        if mine and kind == "program-hang" and step == at:
            announce(kind, step, rank)
            subprocess.run(["sleep", "3600"])   # an upload that never returns
        if mine and kind == "gil-hang" and step == at:
            announce(kind, step, rank)
            hold_the_gil()
        if kind == "long-eval" and step == at:
            if mine:
                announce(kind, step, rank)
            evaluate(model, args.eval_seconds * (2 if mine else 1))
            break
        if kind in ("slow-save", "stalled-save") and step == at:
            if mine:
                announce(kind, step, rank)
                save_slowly(model, args.save_seconds, kind == "stalled-save")
            dist.barrier()
            break
        opt.zero_grad()
        out = model(x)
        if kind == "slow-backward":   # on every rank, so that all run the same graph
            if mine and step == at:
                announce(kind, step, rank)
            out = SlowBackward.apply(out, args.slow_seconds if mine and step >= at else 0.0)
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        metric = loss.detach().reshape(1)
        if pair is not None and rank in (0, 1):
            if mine and step == at:
                announce(kind, step, rank)
                if kind == "subgroup-size":
                    dist.all_reduce(torch.zeros(1000), group=pair)
                elif kind == "subgroup-dtype":
                    dist.all_reduce(torch.zeros(1, dtype=torch.int32), group=pair)
            else:
                dist.all_reduce(metric.clone(), group=pair)
        if args.p2p or args.p2p_group:
            skip_send = mine and kind == "skip-send" and step == at
            pass_down(metric.clone(), step, rank, dist.get_world_size(), skip_send, pipeline)
            if pipeline is not None:
                dist.all_reduce(metric.clone(), group=pipeline)
        if args.coalesced:
            if mine and kind == "skip-coalesced" and step == at:
                announce(kind, step, rank)
                break
            with c10d._coalescing_manager(None, []):   # torch 1.13's parameters: (group, reqs)
                dist.all_reduce(metric.clone())
                dist.all_reduce(torch.ones(7) * metric)
            if kind == "skip-coalesced" and step == at:
                break
        if mine and kind == "size" and step == at:
            announce(kind, step, rank)
            metric = torch.zeros(1000)
        if mine and kind == "skip" and step == at:
            announce(kind, step, rank)
        else:
            dist.all_reduce(metric)
        if kind == "skip" and step == at:
            break
        time.sleep(args.step_sleep)
    dist.barrier()
    if rank == 0:
        print("torch_ddp_trouble: done", flush=True)


if __name__ == "__main__":
    main()
