#!/usr/bin/python3
"""Usage: ignore_term.py OUTDIR [FAIL_RANK CODE DELAY]
Ignores SIGTERM (and SIGINT, SIGHUP), writes OUTDIR/pid_<RANK> and ready_<RANK>, sleeps.
If FAIL_RANK is given, that rank exits CODE after DELAY seconds instead."""
import os
import signal
import sys
import time

out = sys.argv[1]
rank = os.environ["RANK"]
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)


def write(name, text):
    tmp = os.path.join(out, "." + name)
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(out, name))


write(f"pid_{rank}", str(os.getpid()))
write(f"ready_{rank}", "ready")
print(f"rank {rank} ignoring SIGTERM", flush=True)
if len(sys.argv) > 2 and rank == sys.argv[2]:
    time.sleep(float(sys.argv[4]))
    sys.exit(int(sys.argv[3]))
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.05)
