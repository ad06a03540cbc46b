"""The program the rank's main thread waits for, where it waits for one it
started with subprocess or os.system (an upload through a cloud CLI, an
rsync, a preprocessing script): its command line and what it does as the
kernel sees it, added to the main thread's stack. Such a child runs no
companion and answers no stack request (signal_stacks.py signals only
processes that armed its handler), so without this the merged stacks end at
subprocess.py's wait and say nothing of what hangs.

Threading: runs on the companion's thread while it answers a stack request;
reads only /proc and the main thread's frames."""

import linecache
import os

from . import signal_stacks

MAX_COMMAND = 160     # characters of a command line kept
MAX_DEPTH = 4         # single-child chain followed (sh -c -> the command -> ...)

# Where subprocess waits: Popen's methods and the helpers that call them.
_POPEN_WAITS = ("_try_wait", "_wait", "wait", "communicate", "_communicate")
_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible sleep", "T": "stopped by a signal",
           "t": "stopped by a tracer", "Z": "exited, not reaped yet", "X": "exited"}


def awaited_pid(frame, answered):
    """The pid of the child the thread at `frame` (innermost) waits for, or
    None: a subprocess.Popen waited on in subprocess.py; or, where its
    innermost Python line calls os.system (C code, no frame of its own),
    the rank's child that did not answer for its stacks (`answered`: the
    pids that did), the shell among them where there are several (a shell
    may have exec()ed the command itself)."""
    innermost = frame
    while frame is not None:
        code = frame.f_code
        if code.co_name in _POPEN_WAITS and code.co_filename.endswith("subprocess.py"):
            pid = getattr(frame.f_locals.get("self"), "pid", None)
            if isinstance(pid, int) and pid > 0:
                return pid
        frame = frame.f_back
    if innermost is None:
        return None
    line = linecache.getline(innermost.f_code.co_filename, innermost.f_lineno or 0, innermost.f_globals)
    if "system(" not in line:
        return None
    silent = [c for c in signal_stacks.children(os.getpid()) if c not in answered]
    shells = [c for c in silent if _is_shell(c)]
    if len(shells) == 1:
        return shells[0]
    return silent[0] if len(silent) == 1 else None


def _is_shell(pid):
    argv = _command(pid)
    return bool(argv) and os.path.basename(argv[0]) in ("sh", "bash", "dash")


def _command(pid):
    """The process's argv, [] when it is gone or unreadable."""
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]]


def _state(pid):
    """"sleeping in pipe_read": its state letter and kernel wait, or "" when gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        # "pid (comm) S ...": comm may hold spaces and parentheses.
        letter = stat[stat.rindex(")") + 2]
    except (OSError, ValueError, IndexError):
        return ""
    text = _STATES.get(letter, "state " + letter)
    try:
        with open("/proc/%d/wchan" % pid) as f:
            wchan = f.read().strip()
    except OSError:
        wchan = ""
    if wchan and wchan != "0" and letter in "SD":
        text += " in " + wchan
    return text


def describe(pid):
    """"pid 12: /bin/sh -c 'rsync ...' -> pid 13: rsync ... (sleeping in
    pipe_read)": the child, and down its chain of only children, what the
    innermost one does."""
    parts = []
    for _ in range(MAX_DEPTH):
        argv = _command(pid)
        text = " ".join(argv) if argv else "?"
        if len(text) > MAX_COMMAND:
            text = text[:MAX_COMMAND - 3] + "..."
        parts.append("pid %d: %s" % (pid, text))
        children = signal_stacks.children(pid)
        if len(children) != 1:
            break
        pid = children[0]
    state = _state(pid)
    return " -> ".join(parts) + (" (%s)" % state if state else " (gone)")


def attach(threads, main_frame, answered):
    """Continues the main thread's stack (threads[0], from stacks.collect)
    into the child it waits for, if any."""
    if not threads or not threads[0]["main"]:
        return
    pid = awaited_pid(main_frame, answered)
    if pid is None:
        return
    threads[0]["frames"] = threads[0]["frames"] + [
        {"function": "child process", "file": "", "line": 0, "code": describe(pid)}]
