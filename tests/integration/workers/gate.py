#!/usr/bin/python3
"""Usage: gate.py OUTDIR [CODE [LINES]]
A worker the test drives through files, so it never has to guess with sleeps:
prints LINES numbered lines "rank R line NN" (default 0), then "rank R ready" on
stdout and "rank R stderr ready" on stderr, and writes OUTDIR/pid_<RANK> and
OUTDIR/ready_<RANK>. Then, for k = 0, 1, ...: when OUTDIR/say_<k> appears it prints
"rank R says <its content>"; when OUTDIR/go appears (after the say files there are)
it prints "rank R done" and exits CODE (default 0). Gives up after 120 s (exit 4)."""
import os
import sys
import time

out = sys.argv[1]
code = int(sys.argv[2]) if len(sys.argv) > 2 else 0
lines = int(sys.argv[3]) if len(sys.argv) > 3 else 0
rank = os.environ["RANK"]


def write(name, text):
    tmp = os.path.join(out, "." + name)
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(out, name))


for i in range(lines):
    print(f"rank {rank} line {i:02d}", flush=True)
print(f"rank {rank} ready", flush=True)
print(f"rank {rank} stderr ready", file=sys.stderr, flush=True)
write(f"pid_{rank}", str(os.getpid()))
write(f"ready_{rank}", "ready")

k = 0
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    say = os.path.join(out, f"say_{k}")
    if os.path.exists(say):
        with open(say) as f:
            print(f"rank {rank} says {f.read().strip()}", flush=True)
        k += 1
        continue
    if os.path.exists(os.path.join(out, "go")):
        print(f"rank {rank} done", flush=True)
        sys.exit(code)
    time.sleep(0.02)
print(f"rank {rank}: no OUTDIR/go within 120 s", file=sys.stderr, flush=True)
sys.exit(4)
