"""World size 2, Gloo. Rank 0 waits for rank 1 three times: in a blocking
recv, in an irecv's wait(), and in a batch_isend_irecv's; rank 1 goes on to
its matching send(s) each time the test sends it a line.
Usage: peer_waits.py RANK INIT_FILE"""
import sys

import torch
import torch.distributed as dist


def main():
    rank = int(sys.argv[1])
    dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=rank, world_size=2)
    t = torch.zeros(16)
    if rank == 0:
        print("recv", flush=True)
        dist.recv(t, src=1)
        print("irecv", flush=True)
        dist.irecv(t, src=1).wait()
        print("batch", flush=True)
        ops = [dist.P2POp(dist.isend, torch.ones(4), 1), dist.P2POp(dist.irecv, torch.zeros(8), 1)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    else:
        sys.stdin.readline()
        dist.send(torch.ones(16), dst=0)
        sys.stdin.readline()
        dist.send(torch.ones(16), dst=0)
        sys.stdin.readline()
        ops = [dist.P2POp(dist.irecv, torch.zeros(4), 0), dist.P2POp(dist.isend, torch.ones(8), 0)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
