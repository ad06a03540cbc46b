"""World size 1, Gloo: DDP steps in lockstep with the test (one step per
line on stdin), a user all_reduce after each, then an async all_reduce and a
barrier. Usage: ddp_train.py INIT_FILE STEPS"""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1, int(sys.argv[2]) + 1):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        dist.all_reduce(torch.ones(16))          # 64 bytes of float32
        print("step %d" % step, flush=True)
        sys.stdin.readline()
    work = dist.all_reduce(torch.ones(2, dtype=torch.float64), async_op=True)
    work.wait()
    dist.barrier()
    print("done", flush=True)
    sys.stdin.read()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
