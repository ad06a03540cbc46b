#!/usr/bin/python3
"""Usage: torch_save_checkpoints.py CKPT_DIR [--steps N] [--gate DIR] [--delete-first]
                                    [--big-mib M] [--plain]

A training script as people write it, for the --sync tests: nothing in it knows
about ddplaunch's --sync. Under ddplaunch (torchrun environment) it trains a tiny
model with torch's DistributedDataParallel over Gloo for N steps (default 3); after
each step rank 0 saves a checkpoint the usual safe way,

    torch.save(state, CKPT_DIR/ckpt_<step>.pt.tmp); os.replace(tmp, CKPT_DIR/ckpt_<step>.pt)

and also writes a scratch file CKPT_DIR/scratch_<step>.tmp that it closes and deletes
at once (a temp file that must never reach the bucket).

--plain           no torch at all (fast start): one process, the "checkpoint" is
                  bytes derived from the step, written and renamed the same way.
--gate DIR        before saving step k, wait for DIR/go_<k>; after saving, write
                  DIR/saved_<k> (so a test decides when each save happens).
--delete-first    after the last step (with --gate: once DIR/go_delete is there),
                  rank 0 deletes ckpt_1.pt.
--exit-code N     exit N at the end (default 0).
--big-mib M       after the last step, rank 0 also writes big.bin of M MiB (tmp +
                  os.replace).
Gives up after 120 s of waiting for a gate file (exit 4).
"""
import argparse
import hashlib
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("ckpt_dir")
p.add_argument("--steps", type=int, default=3)
p.add_argument("--gate")
p.add_argument("--delete-first", action="store_true")
p.add_argument("--big-mib", type=int, default=0)
p.add_argument("--plain", action="store_true")
p.add_argument("--exit-code", type=int, default=0)
args = p.parse_args()

rank = int(os.environ.get("RANK", "0"))
os.makedirs(args.ckpt_dir, exist_ok=True)


def gate_wait(name):
    if not args.gate:
        return
    path = os.path.join(args.gate, name)
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"rank {rank}: gave up waiting for {path}", file=sys.stderr, flush=True)
            sys.exit(4)
        time.sleep(0.02)


def gate_tell(name):
    if args.gate and rank == 0:
        tmp = os.path.join(args.gate, "." + name)
        with open(tmp, "w") as f:
            f.write("1")
        os.replace(tmp, os.path.join(args.gate, name))


def write_renamed(final, save):
    tmp = final + ".tmp"
    save(tmp)
    os.replace(tmp, final)


if args.plain:
    torch = dist = model = None
else:
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

for step in range(1, args.steps + 1):
    if model is not None:
        g = torch.Generator().manual_seed(step * 100 + rank)
        x = torch.randn(16, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    gate_wait(f"go_{step}")
    if rank == 0:
        final = os.path.join(args.ckpt_dir, f"ckpt_{step}.pt")
        if model is not None:
            state = {"step": step, "model": model.module.state_dict(), "opt": opt.state_dict()}
            write_renamed(final, lambda t: torch.save(state, t))
        else:
            data = hashlib.sha256(f"step {step}".encode()).digest() * 64
            write_renamed(final, lambda t: open(t, "wb").write(data))
        scratch = os.path.join(args.ckpt_dir, f"scratch_{step}.tmp")
        with open(scratch, "wb") as f:
            f.write(b"scratch" * 100)
        os.remove(scratch)
        print(f"saved {final}", flush=True)
    if dist is not None:
        dist.barrier()
    gate_tell(f"saved_{step}")

if rank == 0 and args.big_mib:
    big = os.path.join(args.ckpt_dir, "big.bin")
    block = hashlib.sha256(b"big").digest() * (1 << 15)  # 1 MiB
    def write_big(t):
        with open(t, "wb") as f:
            for i in range(args.big_mib):
                f.write(i.to_bytes(4, "little") + block[4:])
    write_renamed(big, write_big)
    print(f"saved {big}", flush=True)

if args.delete_first:
    gate_wait("go_delete")
    if rank == 0:
        os.remove(os.path.join(args.ckpt_dir, "ckpt_1.pt"))
        print("deleted ckpt_1.pt", flush=True)

if dist is not None:
    dist.barrier()
    dist.destroy_process_group()
print(f"rank {rank} done", flush=True)
sys.exit(args.exit_code)
