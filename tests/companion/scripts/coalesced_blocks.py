"""World size 1, Gloo: coalesced blocks (torch.distributed's _coalescing_manager)
on the default group and on a group of its own, each followed by a plain
all_reduce there (and all_reduce_coalesced on the default group). With "deferred", torch 1.13 first does what torch 2.1 and
later do with such a block: one call, counted once, as it ends
(tests/integration/workers/torch_coalesced_counting.py).
Usage: coalesced_blocks.py INIT_FILE [deferred]"""
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d


def main():
    if sys.argv[2:] == ["deferred"]:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "integration",
                                        "workers"))
        import torch_coalesced_counting
        torch_coalesced_counting.install()
    dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
    group = dist.new_group([0])
    with c10d._coalescing_manager(None, []):   # torch 1.13's parameters: (group, reqs)
        dist.all_reduce(torch.ones(3))
        dist.all_reduce(torch.ones(5))
    dist.all_reduce(torch.ones(2))
    dist.all_reduce_coalesced([torch.ones(2), torch.ones(3)], async_op=True).wait()   # a Future
    with c10d._coalescing_manager(group, []):
        dist.all_reduce(torch.ones(4), group=group)
        dist.all_reduce(torch.ones(6), group=group)
    dist.all_reduce(torch.ones(1), group=group)
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
