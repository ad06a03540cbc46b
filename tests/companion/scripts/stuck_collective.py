"""World size 2, Gloo. Both ranks all_reduce once; then rank 0 enters a
barrier that rank 1 joins only when the test sends it a line.
Usage: stuck_collective.py RANK INIT_FILE"""
import sys

import torch
import torch.distributed as dist


def main():
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    dist.all_reduce(torch.ones(4))
    if rank == 1:
        sys.stdin.readline()
    else:
        print("waiting", flush=True)
    dist.barrier()
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
