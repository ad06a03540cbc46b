"""World size 2, Gloo, with two subgroups: `pair` (ranks 0 and 1) and `solo`
(rank 1 only). Both ranks all_reduce once on the default group and once on
`pair`; rank 0 also calls all_reduce on `solo`, which it is no member of
(torch returns at once). Then rank 0 waits in a second all_reduce on `pair`
that rank 1 joins only when the test sends it a line; last, an async one.
Usage: subgroup_collective.py RANK INIT_FILE"""
import sys

import torch
import torch.distributed as dist


def main():
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    pair = dist.new_group([0, 1])
    solo = dist.new_group([1])
    dist.all_reduce(torch.ones(4))
    dist.all_reduce(torch.ones(8), group=pair)
    if rank == 0:
        dist.all_reduce(torch.ones(2), group=solo)
        print("waiting", flush=True)
    else:
        sys.stdin.readline()
    dist.all_reduce(torch.ones(3), group=pair)
    dist.all_reduce(torch.ones(5), group=pair, async_op=True).wait()
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
