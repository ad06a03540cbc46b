#!/usr/bin/python3
"""Usage: attempts.py OUTDIR
A worker whose first attempt fails when told to: in attempt K
(TORCHELASTIC_RESTART_COUNT) it prints "rank R attempt K", writes
OUTDIR/ready_<R>_<K>, waits for OUTDIR/go_<K>, prints "rank R attempt K done" and
exits 3 in attempt 0, 0 in later ones. Gives up after 120 s (exit 4)."""
import os
import sys
import time

out = sys.argv[1]
rank = os.environ["RANK"]
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
print(f"rank {rank} attempt {attempt}", flush=True)
tmp = os.path.join(out, f".ready_{rank}_{attempt}")
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(out, f"ready_{rank}_{attempt}"))
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    if os.path.exists(os.path.join(out, f"go_{attempt}")):
        print(f"rank {rank} attempt {attempt} done", flush=True)
        sys.exit(3 if attempt == 0 else 0)
    time.sleep(0.02)
sys.exit(4)
