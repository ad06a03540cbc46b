"""The Python stack at a fatal signal (SIGSEGV, SIGFPE, SIGABRT, SIGBUS,
SIGILL): the standard library's faulthandler writes the crashing thread's
stack to rank_<r>/fatal_stack.log, from the signal handler, then the signal
takes its course (the exit status is unchanged). The launcher puts that text
in the failure report, where it would otherwise only say "Signal 11
(SIGSEGV) received". Forked children (DataLoader workers) inherit it and
write to the same file, so a worker's crash is located too.

Left alone where the program or its environment already enabled faulthandler
(PYTHONFAULTHANDLER, -X faulthandler): its output then goes where asked."""

import faulthandler
import os

FILE_NAME = "fatal_stack.log"


class FatalStack(object):
    """Owns the open file faulthandler writes to (it must stay open)."""

    def __init__(self, path, f):
        self.path = path
        self.file = f

    def remove_if_empty(self):
        """At the rank's normal exit: an empty file says nothing."""
        try:
            if os.fstat(self.file.fileno()).st_size == 0:
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
        f = open(path, "w")
    except OSError:
        return None
    try:
        faulthandler.enable(file=f, all_threads=False)
    except (OSError, RuntimeError, ValueError):
        f.close()
        return None
    return FatalStack(path, f)
