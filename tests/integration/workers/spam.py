#!/usr/bin/python3
"""Usage: spam.py NLINES LINELEN
Writes NLINES lines "R<rank>:<i>:xxxx..." (LINELEN x's) to stdout and "E<rank>:<i>:yyyy..."
to stderr, each line in several raw os.write() chunks (so the launcher sees partial lines),
then a final stdout fragment "tail-no-newline-R<rank>" without a newline."""
import os
import sys
import time

n, length = int(sys.argv[1]), int(sys.argv[2])
rank = os.environ["RANK"]
chunk = 701
for i in range(n):
    for fd, tag, ch in ((1, "R", "x"), (2, "E", "y")):
        data = f"{tag}{rank}:{i}:{ch * length}\n".encode()
        for off in range(0, len(data), chunk):
            os.write(fd, data[off:off + chunk])
            if i % 16 == 0:
                time.sleep(0.001)
os.write(1, f"tail-no-newline-R{rank}".encode())
