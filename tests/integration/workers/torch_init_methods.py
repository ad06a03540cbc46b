#!/usr/bin/python3
"""A Gloo all_reduce after init_process_group with init_method env:// or tcp://,
as PyTorch's documentation writes them. Prints one line per rank:
  rank R world W init METHOD sum S elastic True|False
Usage: torch_init_methods.py env|tcp"""
import os
import sys

import torch
import torch.distributed as dist


def main():
    method = sys.argv[1]
    if method == "tcp":
        init = f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
        dist.init_process_group("gloo", init_method=init, rank=int(os.environ["RANK"]),
                                world_size=int(os.environ["WORLD_SIZE"]))
    else:
        dist.init_process_group("gloo", init_method="env://")
    t = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()} world {dist.get_world_size()} init {method} sum {t.item():g} "
          f"elastic {dist.is_torchelastic_launched()}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
