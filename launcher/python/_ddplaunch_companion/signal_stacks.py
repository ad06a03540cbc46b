"""Python stacks taken by a signal, without the GIL: the rank's Python
descendants' (DataLoader workers, multiprocessing helpers), taken with the
rank's own when the agent asks, and the rank's own
when its companion cannot answer (a thread holds the GIL in C code): the
agent then signals the rank itself (launcher/src/stacks/python_signal_stacks.h).

At activation in the rank, again in each forked child right after fork
(a child keeps no companion: it must stay silent), and first thing in a
spawn or forkserver child (descendants.py), the standard library's
faulthandler is told to write every thread's Python stack into an anonymous
memory file (memfd "ddplaunch-stacks") on a signal (SIGRTMIN+6; the
runtime's C++ stack dumps use SIGRTMIN+5). It writes from the signal
handler, without the GIL, so a process blocked in C (a read, a sleep, a
lock) still answers. System calls the kernel restarts (SA_RESTART) go on; one
it does not (a C-level sleep or poll) returns early with EINTR, which
Python's own calls retry. A reader signals only a process that still has that memory
file and catches the signal (an exec() drops both, and the signal's default
action would end the process), then reads what it wrote through
/proc/<pid>/fd. Programs started by subprocess or os.system are not
signalled; the one the main thread waits for is described (waited_child.py).

Threading: arm runs at activation and in a child as it starts; the
rest runs on the companion's thread while it answers a stack request."""

import faulthandler
import linecache
import os
import re
import signal
import time

SIGNAL = signal.SIGRTMIN + 6
MEMFD_NAME = "ddplaunch-stacks"
MAX_DESCENDANTS = 16       # signalled per request
WAIT_SECONDS = 0.3         # for their dumps, all together
POLL_SECONDS = 0.005
MAX_DUMP_BYTES = 1 << 20

_THREAD_RE = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+) \(most recent call first\):$")
_FRAME_RE = re.compile(r'^  File "(.*)", line (\d+|\?\?\?) in (.*)$')


_fd = None   # this process's memory file


def arm():
    """Dump the stacks into this process's own memory file on SIGNAL. In a
    forked child, the parent's file (inherited) is closed first: a reader
    must find one file per process, its own."""
    global _fd
    if _fd is not None:
        try:
            os.close(_fd)
        except OSError:
            pass
        _fd = None
    try:
        fd = os.memfd_create(MEMFD_NAME, os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        return
    try:
        faulthandler.register(SIGNAL, file=fd, all_threads=True, chain=False)
    except (AttributeError, OSError, RuntimeError, ValueError):
        os.close(fd)
        return
    _fd = fd


def children(pid):
    """A process's children, from the kernel's per-thread lists (a fork is
    made on one of its threads)."""
    found = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return found
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                found.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return sorted(set(found))


def _descendants(pid, limit):
    """Up to `limit` descendants, nearest first: a forkserver's workers are
    the rank's grandchildren."""
    found = []
    level = [pid]
    while level and len(found) < limit:
        level = [c for p in level for c in children(p)]
        found.extend(level)
    return found[:limit]


def _catches_signal(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (SIGNAL - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _dump_file(pid):
    """/proc/<pid>/fd/<n> of the child's memory file, or None."""
    folder = "/proc/%d/fd" % pid
    try:
        fds = os.listdir(folder)
    except OSError:
        return None
    for fd in fds:
        try:
            if os.readlink(os.path.join(folder, fd)).startswith("/memfd:" + MEMFD_NAME + " "):
                return os.path.join(folder, fd)
        except OSError:
            continue
    return None


def _size(fd):
    try:
        return os.fstat(fd).st_size
    except OSError:
        return -1


def _read_from(fd, offset):
    try:
        return os.pread(fd, MAX_DUMP_BYTES, offset).decode("utf-8", "replace")
    except OSError:
        return ""


def parse_dump(text):
    """faulthandler's all-threads text -> [{"name", "main", "frames":
    [outermost first]}]; "main" marks the thread the signal ran on."""
    threads = []
    frames = None
    for line in text.splitlines():
        m = _THREAD_RE.match(line)
        if m:
            frames = []
            threads.append({"name": "thread %s" % m.group(2), "main": m.group(1) == "Current thread",
                            "frames": frames})
            continue
        m = _FRAME_RE.match(line)
        if m and frames is not None:
            lineno = 0 if m.group(2) == "???" else int(m.group(2))
            code = linecache.getline(m.group(1), lineno).strip() if lineno else ""
            frames.append({"function": m.group(3), "file": m.group(1), "line": lineno, "code": code[:240]})
    for t in threads:
        t["frames"].reverse()
    return threads


def dump_descendants(pid):
    """{descendant pid: its threads (parse_dump)} of the descendants that
    answered within WAIT_SECONDS."""
    asked = {}   # child -> (our descriptor of its memory file, its size before)
    try:
        for child in _descendants(pid, MAX_DESCENDANTS):
            path = _dump_file(child)
            if path is None or not _catches_signal(child):
                continue
            # Opened before the signal: readable even if the child then ends.
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue
            asked[child] = (fd, _size(fd))
            try:
                os.kill(child, SIGNAL)
            except OSError:
                os.close(asked.pop(child)[0])
        return _collect_answers(asked)
    finally:
        for fd, _ in asked.values():
            os.close(fd)


def _collect_answers(asked):
    got = {}
    last = {child: before for child, (_, before) in asked.items()}
    waiting = set(asked)
    deadline = time.monotonic() + WAIT_SECONDS
    while waiting and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
        for child in list(waiting):
            fd, before = asked[child]
            size = _size(fd)
            # Written: grown, and the same size as at the last look.
            if size > before and size == last[child]:
                threads = parse_dump(_read_from(fd, before))
                if threads:
                    got[child] = threads
                waiting.discard(child)
            last[child] = size
    return got


def awaited_worker(frame):
    """(worker id, pid) of the DataLoader worker whose batch the thread at
    `frame` (innermost) waits for, or None: the iterator's own record of the
    batch it expects next (torch 1.13 to 2.x: _rcvd_idx, _task_info)."""
    while frame is not None:
        if frame.f_code.co_name in ("_next_data", "_get_data", "_try_get_data") and \
                "/torch/utils/data/" in frame.f_code.co_filename:
            it = frame.f_locals.get("self")
            try:
                info = it._task_info.get(it._rcvd_idx)
                if info is not None and len(info) == 1:   # not yet received
                    worker_id = int(info[0])
                    return worker_id, int(it._workers[worker_id].pid)
            except Exception:
                return None
            return None
        frame = frame.f_back
    return None


def _worker_frames(threads):
    """The frames of a child's thread that runs the DataLoader worker loop
    (else the signalled one), from the loop on: what it inherited from the
    rank's stack at fork is left out."""
    chosen = next((t for t in threads if any(f["function"] == "_worker_loop" for f in t["frames"])), None)
    if chosen is None:
        chosen = next((t for t in threads if t["main"]), threads[0])
    frames = chosen["frames"]
    for name in ("_worker_loop", "_bootstrap"):
        starts = [i for i, f in enumerate(frames) if f["function"] == name]
        if starts:
            return frames[starts[-1]:]
    return frames


def attach(threads, children, awaited):
    """Adds the children's stacks to `threads` (the rank's, from
    stacks.collect), as threads named after the child; and where the main
    thread waits for a DataLoader worker's batch (`awaited`: (worker id,
    pid)), continues the main thread's stack into that worker's."""
    if awaited is not None and awaited[1] in children and threads and threads[0]["main"]:
        worker_id, pid = awaited
        threads[0]["frames"] = threads[0]["frames"] + [
            {"function": "DataLoader worker", "file": "", "line": 0,
             "code": "worker %d, pid %d" % (worker_id, pid)}] + _worker_frames(children[pid])
    for pid in sorted(children):
        for t in children[pid]:
            threads.append(dict(t, name="child pid %d: %s" % (pid, t["name"]), main=False))
