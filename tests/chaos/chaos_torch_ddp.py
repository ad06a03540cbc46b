#!/usr/bin/python3
"""A plain PyTorch DDP script (Gloo, CPU) for the chaos campaign: deterministic,
checkpointed and resumable, so a run that was interrupted and restarted ends
with parameters bitwise equal to an uninterrupted one. It knows nothing of
ddplaunch except for the optional faults below, which reach into the Python
companion that ddplaunch injects into every rank.

Usage: chaos_torch_ddp.py CKPT_DIR [--steps N] [--ckpt-every K] [--step-sleep S]
                          [--fault KIND@STEP:RANK]

Each step's batch depends on (step, rank) alone; rank 0 writes CKPT_DIR/ckpt.pt
({"step", "model", "optim"}) every K steps (temporary file, fsync, rename), and
every rank resumes from it when it exists ("chaos_torch_ddp: rank R resumed at
step N"). At the end rank 0 prints "chaos_torch_ddp: final sha256 HEX" over
every parameter's bytes.

--step-sleep and --fault act in the first attempt only (TORCHELASTIC_RESTART_COUNT
0). Faults (the rank prints "chaos_torch_ddp: fault KIND at step S rank R" first):
  raise             an uncaught exception
  companion-stop    the companion's heartbeat thread ends (as if it had died)
  companion-wedge   the companion's heartbeat thread blocks forever on its lock
  companion-close   the companion's socket to the agent is shut down
"""
import argparse
import datetime
import hashlib
import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def companion_agent():
    """The companion's Agent object in this rank, or None without a companion."""
    collectives = sys.modules.get("_ddplaunch_companion.collectives")
    sender = getattr(collectives, "eager_sender", None)
    return getattr(sender, "__self__", None)


def inject(kind, step, rank):
    print(f"chaos_torch_ddp: fault {kind} at step {step} rank {rank}", file=sys.stderr, flush=True)
    if kind == "raise":
        raise RuntimeError(f"chaos: injected exception at step {step}")
    agent = companion_agent()
    if agent is None:
        print("chaos_torch_ddp: no companion in this rank", file=sys.stderr, flush=True)
        return
    if kind == "companion-stop":
        sys.modules["_ddplaunch_companion.progress"].STATE.sending = False
    elif kind == "companion-wedge":
        lock = agent.channel.lock
        holding = threading.Event()

        def hold():
            lock.acquire()
            holding.set()
            while True:
                time.sleep(3600)
        threading.Thread(target=hold, name="chaos-wedge", daemon=True).start()
        holding.wait(5)
    elif kind == "companion-close":
        try:
            agent.channel.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
    else:
        raise SystemExit(f"chaos_torch_ddp: unknown fault {kind}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt_dir")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--fault", default="")
    args = ap.parse_args()
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    fault = None
    if args.fault and first_attempt:
        kind, _, where = args.fault.partition("@")
        fstep, _, frank = where.partition(":")
        fault = (kind, int(fstep), int(frank))

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    path = os.path.join(args.ckpt_dir, "ckpt.pt")
    start = 0
    if os.path.exists(path):
        saved = torch.load(path)
        net.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optim"])
        start = saved["step"]
        print(f"chaos_torch_ddp: rank {rank} resumed at step {start}", flush=True)
    model = nn.parallel.DistributedDataParallel(net)
    for step in range(start, args.steps):
        if fault and fault[1] == step and fault[2] == rank:
            inject(fault[0], step, rank)
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(8, 16, generator=g)
        y = torch.randn(8, 4, generator=g)
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        if rank == 0:
            print(f"chaos_torch_ddp: step {step + 1}/{args.steps}", flush=True)
        if rank == 0 and (step + 1) % args.ckpt_every == 0:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as f:
                torch.save({"step": step + 1, "model": net.state_dict(), "optim": opt.state_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        if first_attempt and args.step_sleep > 0:
            time.sleep(args.step_sleep)
    if rank == 0:
        h = hashlib.sha256()
        for name, p in net.state_dict().items():
            h.update(name.encode())
            h.update(p.detach().contiguous().numpy().tobytes())
        print(f"chaos_torch_ddp: final sha256 {h.hexdigest()} after {args.steps} steps on {world} rank(s)",
              flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
