"""A rank that waits for lines on stdin and answers each with "alive", for
the SIGTERM guard's tests. argv[1]: "fork" (start a child that only sleeps;
the line "reap" waits for it and prints how it ended) or "own-handler" (the
script handles SIGTERM itself). The line "term-and-exit" sends the script a
SIGTERM and exits 0 at once, before the guard's thread may decide (it holds
the guard's lock, as a busy main thread would keep that thread waiting)."""
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
    if line.strip() == "term-and-exit":
        from _ddplaunch_companion import sigterm_guard
        sigterm_guard._lock.acquire()
        os.kill(os.getpid(), signal.SIGTERM)
        while not sigterm_guard._state["received"]:  # the signal may reach another thread first
            time.sleep(0.001)
        sys.exit(0)
    if line.strip() == "reap":
        _, status = os.waitpid(child, 0)
        print("child signal", os.WTERMSIG(status) if os.WIFSIGNALED(status) else -1, flush=True)
    else:
        print("alive", flush=True)
