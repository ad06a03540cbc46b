#!/usr/bin/python3
"""Usage: record_error.py FAIL_RANK MESSAGE
A torchelastic @record main: FAIL_RANK raises RuntimeError(MESSAGE) (so the error file
named by TORCHELASTIC_ERROR_FILE gets a traceback); the other ranks sleep."""
import os
import sys
import time

from torch.distributed.elastic.multiprocessing.errors import record


def inner_function_that_raises(msg):
    raise RuntimeError(msg)


@record
def main():
    rank = os.environ["RANK"]
    print(f"rank {rank} started", flush=True)
    if rank == sys.argv[1]:
        time.sleep(0.3)
        inner_function_that_raises(sys.argv[2])
    time.sleep(60)


if __name__ == "__main__":
    main()
