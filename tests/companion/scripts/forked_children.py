"""Forks two children: one that stays in Python and waits in child_waits(),
and one that exec()s a program (sleep). The rank must answer with the
first one's stack and leave the second alone (the stack signal's default
action would end it)."""
import os
import time


def child_waits():
    time.sleep(120)  # the forked child waits here


def main():
    stays = os.fork()
    if stays == 0:
        child_waits()
        os._exit(0)
    execs = os.fork()
    if execs == 0:
        os.execv("/bin/sleep", ["sleep", "120"])
    while not os.readlink("/proc/%d/exe" % execs).endswith("/sleep"):
        time.sleep(0.01)
    print("ready %d %d" % (stays, execs), flush=True)
    time.sleep(120)


main()
