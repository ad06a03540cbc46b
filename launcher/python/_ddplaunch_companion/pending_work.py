"""The async collectives (async_op=True) a rank has not seen finish: records
kept with a weak reference to their torch Work, polled when a heartbeat is
built. Both record layouts (progress.py, subgroups.py) start with the
sequence number and hold the state at index 4."""

import weakref

SEQ, STATUS = 0, 4
MAX_PENDING = 64


def keep(pending, rec, work):
    """Adds (rec, a weak reference to work): we must not keep the Work (and
    its tensors) alive. At most MAX_PENDING are kept, the newest."""
    try:
        ref = weakref.ref(work)
    except TypeError:
        ref = lambda: work   # noqa: E731 (not weak-referenceable: kept, bounded below)
    pending.append((rec, ref))
    if len(pending) > MAX_PENDING:
        try:
            del pending[0]
        except IndexError:
            pass


def oldest_unfinished(pending):
    """Marks the finished ones completed and drops them; returns the record
    of the oldest still open, or None."""
    oldest = None
    for item in list(pending):
        rec, ref = item
        work = ref()
        try:
            # A Work the program dropped can no longer be asked: count it done.
            done = work is None or finished(work)
        except Exception:
            done = True
        if done:
            if rec[STATUS] == "started":
                rec[STATUS] = "completed"
            try:
                pending.remove(item)
            except ValueError:
                pass
        elif oldest is None or rec[SEQ] < oldest[SEQ]:
            oldest = rec
    return oldest


def finished(work):
    """A Work's is_completed(), or a Future's done() (all_reduce_coalesced and
    all_gather_coalesced return one with async_op=True)."""
    check = getattr(work, "is_completed", None)
    return check() if check is not None else work.done()
