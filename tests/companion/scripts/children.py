"""Starts children every way a training script does: DataLoader workers
under fork and spawn, a subprocess, a plain os.fork() child that dies of an
exception. Prints what each saw, then "done". Usage: children.py BOOTSTRAP_DIR"""
import json
import os
import subprocess
import sys

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

CHILD_CODE = """
import json, os, sys
print(json.dumps({"socket_var": "DDPLAUNCH_COMPANION_SOCKET" in os.environ,
                  "pythonpath": os.environ.get("PYTHONPATH"),
                  "bootstrap_on_path": %r in sys.path}))
"""


class Probe(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.tensor([os.getpid(), int("DDPLAUNCH_COMPANION_SOCKET" in os.environ)])


def main():
    # A process group, so that the rank heartbeats while its children run.
    dist.init_process_group("gloo", init_method="file://" + os.path.abspath("children-init"), rank=0,
                            world_size=1)
    out = {"pid": os.getpid()}
    for ctx in ("fork", "spawn"):
        loader = DataLoader(Probe(), batch_size=1, num_workers=2, multiprocessing_context=ctx)
        out[ctx] = torch.cat(list(loader)).tolist()
    run = subprocess.run([sys.executable, "-c", CHILD_CODE % sys.argv[1]],
                         stdout=subprocess.PIPE, universal_newlines=True, check=True)
    out["subprocess"] = json.loads(run.stdout)
    pid = os.fork()
    if pid == 0:
        raise RuntimeError("forked child fails")   # exits 1 through the excepthook and atexit
    out["fork_status"] = os.waitpid(pid, 0)[1]
    print("result:" + json.dumps(out), flush=True)
    print("done", flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
