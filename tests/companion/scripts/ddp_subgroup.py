"""World size 2, Gloo: DDP on a group of both ranks made with new_group and
passed as process_group=, so its gradient all-reduces go to that group, not
to the default one. One full step, then "stepped"; rank 1 runs its second
backward only when the test sends it a line, so rank 0 waits in DDP's
all-reduce on the group until then. Last, "done".
Usage: ddp_subgroup.py RANK INIT_FILE"""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    group = dist.new_group([0, 1])
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2), process_group=group)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        if step == 1:
            if rank == 0:
                print("stepped", flush=True)
            else:
                sys.stdin.readline()
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        opt.step()
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
