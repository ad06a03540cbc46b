"""World size 1, Gloo: trains until `ddplaunch.should_stop()` says so (at most
100 optimizer steps), then prints "stopped after N" and exits 0.
Usage: stop_steps.py INIT_FILE"""
import sys

import torch
import torch.distributed as dist

import ddplaunch


def main():
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(100):
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        if ddplaunch.should_stop():
            print("stopped after %d" % (step + 1), flush=True)
            return
    print("ran all 100", flush=True)


if __name__ == "__main__":
    main()
