"""Stops inside each phase the companion reports (data, forward, backward,
optimizer, checkpoint) until the test sends a line. The optimizer is a
subclass whose step() calls super().step(): one step must count once."""
import io
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def stop(phase):
    print("at " + phase, flush=True)
    sys.stdin.readline()


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 1

    def __getitem__(self, i):
        stop("data")
        return torch.ones(8)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        stop("forward")
        return self.lin(x)


class StopInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        stop("backward")
        return grad


class MySGD(torch.optim.SGD):
    def step(self, closure=None):
        stop("optimizer")
        return super().step(closure)


class StopOnWrite(io.BytesIO):
    def write(self, data):
        if not getattr(self, "stopped", False):
            self.stopped = True
            stop("checkpoint")
        return super().write(data)


def main():
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    model = DDP(Model())
    torch.optim.SGD(model.parameters(), lr=0.1)          # never steps: not "the first"
    opt = MySGD(model.parameters(), lr=0.1)
    for batch in torch.utils.data.DataLoader(Data(), batch_size=1):
        out = StopInBackward.apply(model(batch))
        out.sum().backward()
        opt.step()
    torch.save(model.state_dict(), StopOnWrite())
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
