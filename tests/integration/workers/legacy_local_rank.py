#!/usr/bin/python3
"""A script written the torch 1.x tutorials' way for python -m torch.distributed.launch:
it parses --local_rank from its arguments. Writes OUTDIR/rank_<RANK>.json with what
it parsed, its argv and its environment.
Usage: legacy_local_rank.py OUTDIR [ARGS...]  (the launcher adds --local_rank=N)"""
import argparse
import json
import os
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("outdir")
    parser.add_argument("rest", nargs="*")
    args = parser.parse_args()
    rank = os.environ.get("RANK", "none")
    with open(os.path.join(args.outdir, f"rank_{rank}.json"), "w") as f:
        json.dump({"local_rank_arg": args.local_rank, "argv": sys.argv, "rest": args.rest,
                   "env": dict(os.environ)}, f)
    print(f"rank {rank} parsed --local_rank {args.local_rank}", flush=True)


if __name__ == "__main__":
    main()
