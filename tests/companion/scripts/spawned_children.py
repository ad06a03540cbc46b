"""Starts children the way multiprocessing does without fork: "wait" starts
one with spawn and one with forkserver, both waiting in child_waits(), and
prints their pids; "crash" starts one with spawn that segfaults in
child_crashes() and prints its exit code. The rank must take the waiting
children's stacks (the forkserver's worker is its grandchild) and have the
crashing child's stack written to its fatal_stack.log."""
import ctypes
import multiprocessing
import sys
import time


def child_waits(ready):
    ready.set()
    time.sleep(120)  # the spawned child waits here


def child_crashes():
    ctypes.string_at(0)  # the spawned child crashes here


def main():
    if sys.argv[1] == "crash":
        child = multiprocessing.get_context("spawn").Process(target=child_crashes)
        child.start()
        child.join(60)
        print("child exit %s" % child.exitcode, flush=True)
        return
    pids = []
    for method in ("spawn", "forkserver"):
        context = multiprocessing.get_context(method)
        ready = context.Event()
        child = context.Process(target=child_waits, args=(ready,), daemon=True)
        child.start()
        if not ready.wait(60):
            raise SystemExit("the %s child did not start" % method)
        pids.append(child.pid)
    print("ready %d %d" % tuple(pids), flush=True)
    time.sleep(120)


if __name__ == "__main__":
    main()
