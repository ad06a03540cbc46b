"""A rank that waits for lines on stdin and answers each with "alive", for
the SIGTERM guard's tests. argv[1]: "fork" (start a child that only sleeps;
the line "reap" waits for it and prints how it ended) or "own-handler" (the
script handles SIGTERM itself)."""
import os
import signal
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "own-handler":
    signal.signal(signal.SIGTERM, lambda signum, frame: print("own handler", flush=True))
child = 0
if mode == "fork":
    child = os.fork()
    if child == 0:  # the fork handlers have run by now
        os.write(1, b"child %d\n" % os.getpid())  # one write: parent and child share stdout
        while True:
            time.sleep(1)
os.write(1, b"ready %d\n" % os.getpid())
for line in sys.stdin:
    if line.strip() == "reap":
        _, status = os.waitpid(child, 0)
        print("child signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1, flush=True)
    else:
        print("alive", flush=True)
