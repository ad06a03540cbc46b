"""World size 2, Gloo: DDP steps where one rank's backward computes 60 ms
longer (time.sleep in the backward of an autograd Function before the
model's own), so the other waits that long for DDP's all-reduce at the end
of its backward. Usage: ddp_slow_backward.py RANK INIT_FILE SLOW_RANK STEPS"""
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class SlowBackward(torch.autograd.Function):
    """The identity; its backward sleeps on the slow rank."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        if dist.get_rank() == int(sys.argv[3]):
            time.sleep(0.06)
        return grad


def main():
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(int(sys.argv[4])):
        opt.zero_grad()
        SlowBackward.apply(model(torch.randn(4, 8))).sum().backward()
        opt.step()
    print("done", flush=True)
    dist.barrier()


if __name__ == "__main__":
    main()
