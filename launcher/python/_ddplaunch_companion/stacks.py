"""Stack dumps on the agent's request: every thread's Python stack (but the
companion's own), appended readably to the rank's stacks.log and returned as
the "stacks" message."""

import linecache
import os
import sys
import threading
import time

from .channel import Channel, MAX_MESSAGE

MAX_THREADS = 32
MAX_FRAMES = 64       # innermost frames kept per thread
MAX_CODE = 240        # characters of a source line


def collect(skip_idents):
    """[{"name", "main", "frames": [outermost first]}], the main thread first."""
    names = {t.ident: t.name for t in threading.enumerate()}
    main_ident = threading.main_thread().ident
    current = sys._current_frames()
    idents = sorted(current, key=lambda i: (i != main_ident, names.get(i, "~"), i))
    threads = []
    for ident in idents:
        if ident in skip_idents:
            continue
        if len(threads) == MAX_THREADS:
            break
        frames = []
        frame = current[ident]
        while frame is not None and len(frames) < MAX_FRAMES:
            code = frame.f_code
            line = frame.f_lineno or 0
            text = linecache.getline(code.co_filename, line, frame.f_globals).strip()
            frames.append({"function": code.co_name, "file": code.co_filename,
                           "line": line, "code": text[:MAX_CODE]})
            frame = frame.f_back
        frames.reverse()
        threads.append({"name": names.get(ident, "thread %d" % ident),
                        "main": ident == main_ident, "frames": frames})
    del current
    return threads


def format_log(threads, pid):
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
    lines = ["=== %s: stacks of pid %d, asked by ddplaunch ===" % (stamp, pid)]
    for t in threads:
        lines.append("Thread %s%s (most recent call last):"
                     % (t["name"], " [main]" if t["main"] else ""))
        for f in t["frames"]:
            if not f["file"]:   # where the stack goes on in another process (signal_stacks.attach)
                lines.append("  --- %s (%s) ---" % (f["function"], f["code"]))
                continue
            lines.append('  File "%s", line %d, in %s' % (f["file"], f["line"], f["function"]))
            if f["code"]:
                lines.append("    " + f["code"])
    return "\n".join(lines) + "\n\n"


def write_log(log_dir, threads, pid):
    if not log_dir:
        return
    try:
        os.makedirs(log_dir, exist_ok=True)
        with open(os.path.join(log_dir, "stacks.log"), "a", encoding="utf-8") as f:
            f.write(format_log(threads, pid))
    except OSError:
        pass


def encode_message(threads):
    """The "stacks" message, encoded; outer frames are cut until it fits."""
    keep = MAX_FRAMES
    while True:
        msg = {"type": "stacks",
               "threads": [dict(t, frames=t["frames"][-keep:] if keep else []) for t in threads]}
        data = Channel.encode(msg)
        if len(data) <= MAX_MESSAGE:
            return data
        if keep == 0:
            threads = threads[:len(threads) // 2]
        else:
            keep //= 2
