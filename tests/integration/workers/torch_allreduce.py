#!/usr/bin/python3
"""Gloo all_reduce over env:// rendezvous. Each rank contributes its rank; prints the sum.
Usage: torch_allreduce.py [FAIL_RANK]  (FAIL_RANK raises before the collective)."""
import os
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"]), (rank, os.environ["RANK"])
    assert world == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])
    if len(sys.argv) > 1 and str(rank) == sys.argv[1]:
        raise RuntimeError(f"rank {rank} fails before all_reduce")
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    expected = world * (world - 1) / 2
    got = t.item()
    if got != expected:
        print(f"rank {rank} BAD sum {got} expected {expected}", flush=True)
        sys.exit(1)
    print(f"rank {rank} world {world} allreduce sum {got:g} OK", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
