"""The Python stack at a fatal signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS,
SIGILL): the standard library's faulthandler writes the crashing thread's
stack to rank_<r>/fatal_stack.log, from the signal handler, then the signal
takes its course (the exit status is unchanged). The launcher puts that text
in the failure report, where it would otherwise only say "Signal 11
(SIGSEGV) received".

DataLoader workers write to the same file, so a worker's crash is located
too: forked ones inherit the handler, spawn/forkserver ones enable it
(descendants.py). A worker installs torch's own handlers for SIGSEGV, SIGBUS
and SIGFPE, which would replace faulthandler's: chain_after_worker_handlers
enables faulthandler again after them, on top, so it writes first and then
calls torch's (which prints its message and ends the worker as before).

Left alone where the program or its environment already enabled faulthandler
(PYTHONFAULTHANDLER, -X faulthandler): its output then goes where asked."""

import faulthandler
import functools
import os

from . import wrapping

FILE_NAME = "fatal_stack.log"
WORKER_SIGNAL_HANDLERS = "torch.utils.data._utils.signal_handling"

# The open file faulthandler writes to, where it is ours: it must stay open
# for as long as the process lives, so the module owns it.
_file = None


class FatalStack(object):
    """The rank's fatal stack file (the module's _file) by its path."""

    def __init__(self, path):
        self.path = path

    def remove_if_empty(self):
        """At the rank's normal exit: an empty file says nothing."""
        try:
            if _file is not None and os.fstat(_file.fileno()).st_size == 0:
                os.unlink(self.path)
        except OSError:
            pass


def install(log_dir):
    """Enables faulthandler into log_dir's file; None where it was enabled
    already or the file cannot be made."""
    if not log_dir or faulthandler.is_enabled():
        return None
    path = os.path.join(log_dir, FILE_NAME)
    try:
        os.makedirs(log_dir, exist_ok=True)
    except OSError:
        return None
    return FatalStack(path) if enable_into(path, "w") else None


def enable_into(path, mode):
    """Enables faulthandler into the file at `path` (opened with `mode`: the
    rank creates it, a descendant appends), which becomes the module's _file;
    whether it did."""
    global _file
    try:
        f = open(path, mode)
    except OSError:
        return False
    try:
        faulthandler.enable(file=f, all_threads=False)
    except (OSError, RuntimeError, ValueError):
        f.close()
        return False
    _file = f
    return True


def chain_after_worker_handlers(signal_handling):
    """Patches torch's DataLoader module so that a worker, once torch set its
    handlers, has faulthandler's run first again (see the module's text)."""
    wrapping.replace(signal_handling, "_set_worker_signal_handlers", _chained)


def _chained(install_handlers):
    @functools.wraps(install_handlers)
    def install_then_chain(*args, **kwargs):
        f = _file
        if f is None or not faulthandler.is_enabled():
            return install_handlers(*args, **kwargs)
        # disable() puts back what was there before ours, so that torch's
        # handlers are what the next enable() saves and calls after writing.
        faulthandler.disable()
        try:
            return install_handlers(*args, **kwargs)
        finally:
            try:
                faulthandler.enable(file=f, all_threads=False)
            except (OSError, RuntimeError, ValueError):
                pass
    return install_then_chain
