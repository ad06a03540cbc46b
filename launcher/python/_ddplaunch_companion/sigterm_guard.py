"""Keeps a rank alive through a SIGTERM that was meant for ddplaunch.

Slurm's --signal, `scancel --signal=TERM`, a preemption or the end of a time
limit send SIGTERM to every process of the job step, the ranks included. With
--stop-timeout ddplaunch answers its SIGTERM by stopping every rank after one
common step, so a rank must not die of the same signal first. ddplaunch then
names a small file (DDPLAUNCH_SIGNAL_INTENT_FILE, in its private folder on
this node) whose one word says what a SIGTERM means now:

  "stopping"     a stop at a step boundary is under way: ignore it;
  "terminating"  ddplaunch itself is signalling its ranks: die of it;
  no file        wait up to WAIT_S for ddplaunch to say (it got the same
                 signal at the same moment), then die of it.

"Die of it" is what the default action does: the process ends by SIGTERM, as
it would have without the companion. The decision runs on a thread woken
through the signal wakeup fd, so it is made even while the main thread waits
inside a collective (where Python runs no signal handler). A handler the
script installs for SIGTERM replaces all of this, as it should. A rank that
reaches the step boundary and exits before that thread has spoken still says
that it kept the signal, from an atexit hook.
"""

import atexit
import os
import signal
import socket
import sys
import threading
import time

WAIT_S = 3.0
POLL_S = 0.02

_state = {"path": None, "rank": -1, "told": False, "wakeup": None, "received": False}
_lock = threading.Lock()  # one decision at a time
_say_lock = threading.Lock()  # the one "ignores a SIGTERM" line, from the deciding thread or at exit


def _intent():
    try:
        with open(_state["path"]) as f:
            return f.read().strip()
    except OSError:
        return ""


def _die():
    """Ends the process by SIGTERM, from any thread."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal(signal.SIGTERM, 0)  # SIG_DFL; signal.signal() works only on the main thread
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1.0)  # delivered meanwhile
    except Exception:
        pass
    os._exit(128 + signal.SIGTERM)


def _ours():
    return signal.getsignal(signal.SIGTERM) is _handler


def _say_kept():
    with _say_lock:
        if _state["told"]:
            return
        _state["told"] = True
        sys.stderr.write("ddplaunch companion: rank %d ignores a SIGTERM from outside ddplaunch: "
                         "ddplaunch is stopping the job at a step boundary\n" % _state["rank"])
        sys.stderr.flush()


def _say_kept_at_exit():
    # The rank stopped at the boundary and is exiting while the deciding
    # thread may still be waiting for its turn: the line must not be lost.
    if _state["received"] and _state["path"] is not None and _intent() == "stopping":
        _say_kept()


def decide():
    """One SIGTERM arrived: ignore it or die of it (see the module's doc)."""
    _state["received"] = True
    with _lock:
        if not _ours():
            return
        if _state["path"] is None:  # a forked child whose handler could not be reset
            _die()
        deadline = time.monotonic() + WAIT_S
        while True:
            word = _intent()
            if word == "terminating":
                _die()
            if word == "stopping":
                _say_kept()
                return
            if time.monotonic() >= deadline:
                _die()
            time.sleep(POLL_S)


def _handler(signum, frame):
    # The main thread runs this when it gets back to Python. Normally the
    # wakeup thread has decided already; if the script took the wakeup fd for
    # itself (asyncio), this is where the decision happens.
    _state["received"] = True
    wakeup = _state["wakeup"]
    try:
        current = signal.set_wakeup_fd(-1)
        signal.set_wakeup_fd(current)
    except (ValueError, OSError):
        current = None
    if wakeup is None or current != wakeup.fileno():
        threading.Thread(target=decide, name="ddplaunch-sigterm", daemon=True).start()


def _watch(reader):
    while True:
        try:
            data = reader.recv(64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if int(signal.SIGTERM) in data:
            decide()


def install(path, rank):
    """Main thread only. Keeps SIGTERM unless the program already handles it
    (or ignores it), or another wakeup fd is set."""
    if not path or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return False
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except (ValueError, OSError):
        reader.close()
        writer.close()
        return False
    if previous != -1:  # not ours to take: leave it, decide in the handler
        signal.set_wakeup_fd(previous)
        writer.close()
        reader.close()
    else:
        _state["wakeup"] = writer
        threading.Thread(target=_watch, args=(reader,), name="ddplaunch-sigterm", daemon=True).start()
    _state["path"] = path
    _state["rank"] = rank
    signal.signal(signal.SIGTERM, _handler)
    atexit.register(_say_kept_at_exit)
    return True


def after_fork_child():
    """A forked child (a DataLoader worker) gets SIGTERM's default back: it
    was never signalled for ddplaunch, and its parent's thread is not here."""
    if _state["path"] is None:
        return
    _state["path"] = None
    try:
        if _state["wakeup"] is not None:
            signal.set_wakeup_fd(-1)
        if _ours():
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
    except (ValueError, OSError):
        pass
