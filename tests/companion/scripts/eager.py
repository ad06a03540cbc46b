"""World size 1, Gloo: one all_reduce of 10 float32 when the test sends a line."""
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    print("ready", flush=True)
    sys.stdin.readline()
    dist.all_reduce(torch.ones(10))
    print("done", flush=True)
    sys.stdin.read()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
