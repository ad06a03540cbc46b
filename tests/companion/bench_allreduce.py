"""Cost of the companion on dist.all_reduce (not a test: run it by hand).

Alternates rank processes with and without the companion (this script
plays the agent and drains its messages), each timing loops of 2000 calls
of a small all_reduce in a world size 1 Gloo group.
Usage: bench_allreduce.py [PAIRS] [ROUNDS]"""

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading

from companion_harness import BOOTSTRAP, PYTHON, script


def drain(listener):
    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=lambda c=conn: [None for _ in iter(lambda: c.recv(300000), b"")],
                         daemon=True).start()


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    rounds = sys.argv[2] if len(sys.argv) > 2 else "5"
    tmp = tempfile.mkdtemp(prefix="ddpl-bench-")
    sock_path = os.path.join(tmp, "agent.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(sock_path)
    listener.listen(8)
    threading.Thread(target=drain, args=(listener,), daemon=True).start()
    base = {k: v for k, v in os.environ.items() if not k.startswith("DDPLAUNCH_")}
    base.update(PYTHONPATH=str(BOOTSTRAP), OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1",
                RANK="0", LOCAL_RANK="0", DDPLAUNCH_HEARTBEAT_INTERVAL_MS="1000",
                DDPLAUNCH_RANK_LOG_DIR=tmp)
    results = {False: [], True: []}
    for i in range(pairs):
        for on in (False, True):
            env = dict(base)
            if on:
                env["DDPLAUNCH_COMPANION_SOCKET"] = sock_path
            out = subprocess.run([PYTHON, script("allreduce_loop.py"),
                                  os.path.join(tmp, "init-%d-%d" % (i, on)), rounds],
                                 env=env, stdout=subprocess.PIPE, universal_newlines=True,
                                 check=True).stdout
            r = json.loads(out)
            assert r["wrapped"] == on, r
            results[on].append(min(r["us_per_call"]))
            print("companion %-3s min %.2f us/call  rounds %s" % (
                "on" if on else "off", min(r["us_per_call"]),
                " ".join("%.1f" % x for x in r["us_per_call"])))
    off, on = statistics.median(results[False]), statistics.median(results[True])
    print("median of per-process minima: off %.2f us, on %.2f us, cost %.2f us/call (%.0f%%)"
          % (off, on, on - off, (on - off) / off * 100))
    listener.close()


if __name__ == "__main__":
    main()
