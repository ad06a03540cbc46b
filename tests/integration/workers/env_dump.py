#!/usr/bin/python3
"""Writes OUTDIR/rank_<RANK>.json with this worker's env, argv and interpreter facts.
Usage: env_dump.py OUTDIR [ARGS...]   (also importable/runnable as `-m env_dump`)."""
import json
import os
import sys


def main():
    outdir = sys.argv[1]
    rank = os.environ.get("RANK", "none")
    info = {
        "env": dict(os.environ),
        "argv": sys.argv,
        "orig_argv": getattr(sys, "orig_argv", None),
        "executable": sys.executable,
        "spec_name": __spec__.name if __spec__ is not None else None,
        "pid": os.getpid(),
        "pgid": os.getpgid(0),
        "cwd": os.getcwd(),
    }
    tmp = os.path.join(outdir, f".rank_{rank}.json.tmp")
    with open(tmp, "w") as f:
        json.dump(info, f)
    os.rename(tmp, os.path.join(outdir, f"rank_{rank}.json"))
    print(f"env_dump rank {rank} ok", flush=True)


if __name__ == "__main__":
    main()
