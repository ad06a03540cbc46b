"""Waits for a program it started: `run` through subprocess.run, `system`
through os.system (a shell that runs it). The rank's stacks must go on into
that program: its command line and what it does."""
import os
import subprocess
import sys


def main(how):
    print("ready", flush=True)
    if how == "run":
        subprocess.run(["sleep", "120"])  # the rank waits for its program here
    else:
        os.system("sleep 120; true")  # the rank waits for its program here


main(sys.argv[1])
