"""Times loops of 2000 dist.all_reduce calls of a 16-float tensor in a world
size 1 Gloo group; prints one JSON line of per-call microseconds.
Usage: allreduce_loop.py INIT_FILE ROUNDS"""
import json
import sys
import time

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    t = torch.ones(16)
    for _ in range(500):
        dist.all_reduce(t)
    rounds = []
    for _ in range(int(sys.argv[2])):
        t0 = time.perf_counter()
        for _ in range(2000):
            dist.all_reduce(t)
        rounds.append((time.perf_counter() - t0) / 2000 * 1e6)
    print(json.dumps({"wrapped": hasattr(dist.all_reduce, "__ddplaunch_wrapped__"),
                      "us_per_call": rounds}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
