#!/usr/bin/python3
"""Usage: trap_signals.py OUTDIR: on SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1 writes OUTDIR/signal_<RANK>
(containing the signal name) and exits 0. Writes OUTDIR/ready_<RANK> once handlers are set."""
import os
import signal
import sys
import time

out = sys.argv[1]
rank = os.environ["RANK"]


def write(name, text):
    tmp = os.path.join(out, "." + name)
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(out, name))


def handler(signum, frame):
    write(f"signal_{rank}", signal.Signals(signum).name)
    os._exit(0)


for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1):
    signal.signal(s, handler)
write(f"pid_{rank}", str(os.getpid()))
write(f"ready_{rank}", "ready")
print(f"rank {rank} ready", flush=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(3)
